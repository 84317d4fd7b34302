"""The gauges a scrape of ``GET /metrics`` reads from Redis: the open reservations and those
past their deadline (``Holds.open_reservations``), then the usage streams' backlog
(``Flusher.lag``), all within ``REDIS_READ_TIMEOUT_S`` or none (a scrape never waits on a
Redis that does not answer: its other series are served all the same)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from app.core.metrics import RedisReadings
from app.credits.holds import Holds
from app.kv.client import REDIS_ERRORS
from app.usage.flusher import Flusher

REDIS_READ_TIMEOUT_S = 1.0


async def redis_readings(
    holds: Holds, flusher: Flusher, clock: Callable[[], float]
) -> RedisReadings | None:
    """The readings, or ``None`` when Redis does not answer in time."""
    with contextlib.suppress(*REDIS_ERRORS, OSError, TimeoutError):
        async with asyncio.timeout(REDIS_READ_TIMEOUT_S):
            reservations = await holds.open_reservations(clock())
            lag = await flusher.lag()
            return RedisReadings(
                open_reservations=reservations.open,
                reservations_past_deadline=reservations.past_deadline,
                pending_events=lag.pending_events,
                oldest_event_age_s=lag.oldest_event_age_s,
            )
    return None
