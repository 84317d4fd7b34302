"""Prometheus metrics, shared across granian's worker processes.

Each worker writes its counters and histograms to memory-mapped files in one directory
(prometheus-client's multiprocess mode: ``workers``); whichever worker answers ``GET
/metrics`` sums them (``scrape``). The RSGI entry point (``app.rsgi``) switches its worker
over with ``share_across_workers`` before serving; granian forks workers from a process that
already imported this package, so the switch rebuilds the metrics in place. A process that
never switches (tests, admin commands) keeps its metrics in memory.

Recording costs an mmap write (a microsecond or two), so the hot path records every request,
never a chunk: the series a stream writes are bound once per alias (``series``: a request
finds a group of them with one dictionary lookup, and builds no label tuple), and a
stream's tokens are counted when it settles. Numbers that live in Redis — open
reservations, unflushed usage events — are read when scraped instead of counted, and so is
``svc_build_info`` (what runs: the same in every worker, so no worker writes it to the
shared files). Gauges across workers: ``svc_open_streams`` is summed over the live workers
(``livesum``: a dead worker's streams are dropped at the next scrape); the others are made
at scrape time by whichever worker answers.

Its parts: ``recorder`` (``Metrics``, every metric svc records, and ``METRICS``), ``labels``
(the label values known in advance), ``series`` (the series bound per route and alias),
``workers`` (the shared directory) and ``scrape`` (the text a scrape answers).
"""

from app.core.metrics.labels import (
    BACKGROUND_TASKS,
    ENVIRONMENTS,
    FIRST_TOKEN,
    MID_STREAM,
    PURCHASE_EVENTS,
    PURCHASE_RESULTS,
    PURCHASE_STORES,
    REPLICA_WAIT_RESULTS,
    SETTLEMENT_OUTCOMES,
    SPOTLIGHT_NETWORKS,
    SPOTLIGHT_RESULTS,
    WEBHOOK_STATES,
)
from app.core.metrics.recorder import METRICS, Metrics, share_across_workers
from app.core.metrics.scrape import (
    CONTENT_TYPE,
    RedisReadings,
    build_labels,
    exposition,
    installed_version,
)
from app.core.metrics.series import BilledTokens

__all__ = [
    "BACKGROUND_TASKS",
    "CONTENT_TYPE",
    "ENVIRONMENTS",
    "FIRST_TOKEN",
    "METRICS",
    "MID_STREAM",
    "PURCHASE_EVENTS",
    "PURCHASE_RESULTS",
    "PURCHASE_STORES",
    "REPLICA_WAIT_RESULTS",
    "SETTLEMENT_OUTCOMES",
    "SPOTLIGHT_NETWORKS",
    "SPOTLIGHT_RESULTS",
    "WEBHOOK_STATES",
    "BilledTokens",
    "Metrics",
    "RedisReadings",
    "build_labels",
    "exposition",
    "installed_version",
    "share_across_workers",
]
