"""Whether a worker can serve (``GET /readyz``): Redis answers and holds every script, and
the durable store answers, each asked within ``READY_TIMEOUT_S`` (a load balancer's probe
never waits on a backend that hangs: it is simply not ready)."""

from __future__ import annotations

import asyncio

from app.core.errors import StoreError
from app.credits.scripts import Scripts
from app.kv.client import REDIS_ERRORS, RedisClient
from app.store import Store

READY_TIMEOUT_S = 2.0


async def readiness(redis: RedisClient, scripts: Scripts, store: Store) -> dict[str, bool]:
    """Each check, by name (``redis``, ``scripts``, ``store``): whether it passed. Ready
    when every one did."""
    checks = {"redis": False, "scripts": False, "store": False}
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            checks["redis"] = bool(await redis.ping())
            checks["scripts"] = await scripts.loaded()
    except (*REDIS_ERRORS, OSError, TimeoutError):
        pass
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            await store.ping()
            checks["store"] = True
    except (StoreError, OSError, TimeoutError):
        pass
    return checks
