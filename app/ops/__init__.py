"""Operations: ``svc admin inspect``, ``reconcile`` and ``rebuild-redis``, an account as an
operator looks it up (``lookup``: the admin API's and ``svc admin account``), the gauges a
metrics scrape reads from Redis (``gauges``), whether a worker can serve (``readiness``),
and the embedded Valkey of the zero-configuration mode.
"""
