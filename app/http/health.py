"""``/healthz`` (the process answers) and ``/readyz`` (it can serve: Redis, its scripts and
the durable store all answer), for load balancers and orchestrators. No authentication."""

from __future__ import annotations

import msgspec
from litestar import Controller, Response, get
from litestar.di import Provide
from litestar.openapi import ResponseSpec

from app.http.deps import provide_services
from app.ops.readiness import readiness
from app.runtime import Services


class Health(msgspec.Struct):
    status: str  # "ok" | "unavailable"
    checks: dict[str, bool] = {}


class HealthController(Controller):
    path = "/"
    dependencies = {"services": Provide(provide_services)}
    include_in_schema = True
    tags = ["health"]

    @get("/healthz")
    async def healthz(self) -> Health:
        """The process is alive and answering."""
        return Health(status="ok")

    @get(
        "/readyz",
        responses={
            503: ResponseSpec(
                data_container=Health,
                generate_examples=False,
                description="Not ready: `status` is `unavailable`, `checks` says what failed.",
            )
        },
    )
    async def readyz(self, services: Services) -> Response[Health]:
        """Redis answers and holds every script; the durable store answers. 503 otherwise."""
        checks = await readiness(services.redis, services.scripts, services.store)
        ready = all(checks.values())
        return Response(
            Health(status="ok" if ready else "unavailable", checks=checks),
            status_code=200 if ready else 503,
            headers={} if ready else {"retry-after": "1"},
        )
