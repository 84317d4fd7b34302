"""``GET /metrics``: Prometheus text format, summed over every worker of the server."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from litestar import Controller, Request, Response, get
from litestar.di import Provide

from app.core.errors import ErrorKind
from app.core.metrics import CONTENT_TYPE, METRICS, RedisReadings, exposition
from app.http.deps import provide_services, request_address
from app.http.openapi import errors
from app.kv.client import REDIS_ERRORS
from app.runtime import Services

REDIS_READ_TIMEOUT_S = 1.0


async def redis_gauges(services: Services) -> RedisReadings | None:
    """The open reservations and those past their deadline (``Holds.open_reservations``),
    then the usage streams' backlog (``Flusher.lag``), or ``None`` when Redis does not
    answer in time."""
    with contextlib.suppress(*REDIS_ERRORS, OSError, TimeoutError):
        async with asyncio.timeout(REDIS_READ_TIMEOUT_S):
            reservations = await services.holds.open_reservations(services.clock())
            lag = await services.flusher.lag()
            return RedisReadings(
                open_reservations=reservations.open,
                reservations_past_deadline=reservations.past_deadline,
                pending_events=lag.pending_events,
                oldest_event_age_s=lag.oldest_event_age_s,
            )
    return None


class MetricsController(Controller):
    path = "/metrics"
    dependencies = {"services": Provide(provide_services)}

    @get(
        "/",
        media_type=CONTENT_TYPE,
        summary="Prometheus metrics",
        tags=["health"],
        responses=errors(ErrorKind.ADMIN_UNAUTHORIZED, ErrorKind.AUTH_RATE_LIMITED),
    )
    async def metrics(self, request: Request[Any, Any, Any], services: Services) -> Response[bytes]:
        """Every worker's counters and histograms, plus gauges read from Redis. Needs
        ``Authorization: Bearer <SVC_METRICS_TOKEN>`` when that token is set."""
        address = request_address(services, request.scope)
        await services.operators.admit_metrics(request.headers.get("authorization"), address)
        body = await exposition(METRICS, lambda: redis_gauges(services))
        return Response(body, media_type=CONTENT_TYPE)
