"""svc's Redis data, one owner each over one set of Lua scripts (``scripts``; package data in
``lua/``): credit movements (``money``), API keys' records (``key_records``), usage counters
(``usage_counts``), the throttles' counters (``throttle_counts``), the JSON routes'
Idempotency-Key records (``idempotency``); what they answer (``outcomes``); and the sweeper
that refunds the reservations of dead workers.
"""
