"""Load-testing harness of svc: mock upstream, load generator, orchestrator."""
