"""Dependencies shared by the routes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import ASGIApp, Receive, Scope, Send

from app.core.logs import request_id
from app.core.operator import ADMIN_API, Operator, acting
from app.credits.outcomes import Identity
from app.keys.roles import require_live
from app.keys.throttle import client_address
from app.runtime import Services


def services_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Services:
    services: Services = connection.app.state.services
    return services


async def provide_services(request: Request[Any, Any, Any]) -> Services:
    return services_of(request)


def request_address(services: Services, scope: Scope) -> str:
    """The client address the failed-auth throttle counts for this request."""
    client = scope.get("client")
    forwarded: list[str] = []
    if services.trusted_proxies:
        forwarded = [v.decode("latin-1") for k, v in scope["headers"] if k == b"x-forwarded-for"]
    return client_address(client[0] if client else None, forwarded, services.trusted_proxies)


def operator_middleware(app: ASGIApp) -> ASGIApp:
    """The admin routes' requests act as the operator (``app.core.operator``): what they
    change is audited with the request's id and client address."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        services: Services = scope["app"].state.services
        who = Operator(
            actor=ADMIN_API,
            request_id=request_id.get(),
            client_address=request_address(services, scope),
        )
        with acting(who):
            await app(scope, receive, send)

    return middleware


async def provide_identity(request: Request[Any, Any, Any]) -> Identity:
    """The authenticated key, checked for revocation."""
    services = services_of(request)
    auth = services.auth
    return await auth.authenticated(
        request.headers.get("authorization"),
        request_address(services, request.scope),
        auth.key_active,
    )


def live_only(why: str) -> Callable[[Identity], Awaitable[Identity]]:
    """A dependency: the request's key when ``require_live`` lets it through (the routes
    whose work belongs to live traffic: webhooks, spotlight rewards, purchases)."""

    async def provide_live(ident: Identity) -> Identity:
        require_live(ident.environment, why)
        return ident

    return provide_live


async def admin_guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Only the bearer of ``SVC_ADMIN_TOKEN`` passes (``OperatorTokens.admit_admin``)."""
    services = services_of(connection)
    address = request_address(services, connection.scope)
    await services.operators.admit_admin(connection.headers.get("authorization"), address)
