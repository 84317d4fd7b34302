"""redis-py for a worker, imported without OpenTelemetry's metrics SDK.

redis-py (8.x) imports ``opentelemetry.sdk.metrics`` whenever it is installed (svc installs
the SDK for its traces), for an observability feature of its own that svc never turns on:
with psutil, which the SDK's resources import, 2.6 MB of RSS per worker (bench/CHANGELOG.md,
issue 53). Imported first by a worker's entry point (``app.rsgi``), this hides the metrics
SDK from redis-py's import alone: redis-py then finds it missing, as it allows, and
everything imported later (svc's traces included) sees the SDK as installed.
"""

from __future__ import annotations

import sys

_HIDDEN = "opentelemetry.sdk.metrics"


def import_redis() -> None:
    """Import redis-py's asyncio client with the metrics SDK hidden; nothing when either is
    already imported (redis-py has then decided for itself)."""
    if "redis" in sys.modules or _HIDDEN in sys.modules:
        return
    sys.modules[_HIDDEN] = None  # type: ignore[assignment]  # None: "not installed"
    try:
        import redis.asyncio  # noqa: F401
    finally:
        del sys.modules[_HIDDEN]


import_redis()
