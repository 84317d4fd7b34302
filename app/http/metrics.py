"""``GET /metrics``: Prometheus text format, summed over every worker of the server."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get
from litestar.di import Provide

from app.core.errors import ErrorKind
from app.core.metrics import CONTENT_TYPE, METRICS, RedisReadings, exposition
from app.http.deps import provide_services, request_address
from app.http.openapi import errors
from app.ops.gauges import redis_readings
from app.runtime import Services


async def redis_gauges(services: Services) -> RedisReadings | None:
    """What a scrape reads from Redis (``app.ops.gauges``), or ``None`` when it does not
    answer in time."""
    return await redis_readings(services.holds, services.flusher, services.clock)


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
