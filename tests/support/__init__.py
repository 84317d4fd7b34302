"""What the test suites share, apart from the tests themselves (the conftest.py files, which
pytest needs beside the tests, import their helpers from here):

- ``ledgers``: the owners of svc's Redis data over one set of scripts (``Ledgers``), as the
  tests build them;
- ``scripts_helpers``: accounts, keys and a full Redis snapshot for the Lua script tests;
- ``databases``: one empty database of each store driver (the ``database`` fixture);
- ``postgres``: a throwaway PostgreSQL server, one database per session;
- ``valkey_cluster``: a real 3-primary Valkey Cluster on 127.0.0.1;
- ``processes``: free ports, and stopping the servers the tests start;
- ``upstream_helpers``: a call to the mock upstream, and services enough for
  ``serve_stream``;
- ``rsgi_transport``: an httpx transport that drives an RSGI app in process, faking
  granian's objects as granian behaves;
- ``granian_probe``: an RSGI app that granian serves for real in
  ``tests/e2e/test_granian_contract.py``, reporting what it saw of granian's objects;
- ``recording_proxy``: a reverse proxy that records what a client sent svc and what svc
  answered (for a client that shows nothing of the wire, Claude Code);
- ``forward_proxy``: a real forward proxy (Debian's tinyproxy) for the egress-proxy tests;
- ``certificates``: a self-signed certificate for 127.0.0.1;
- ``metrics_table``: the metrics table of docs/operations.md, read as names, types, labels;
- ``promql``: a small PromQL reader, and the check of a query against the metrics svc has;
- ``grafana``: the kit's dashboard and the queries of its panels and variables;
- ``prometheus_rules``: the kit's recording and alert rules, and the promtool binary.

The test doubles of svc's upstreams (``bench.mock_upstream``) live in ``bench``, which the
benchmark shares with the tests.
"""
