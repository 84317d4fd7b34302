"""Dependencies shared by the routes."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import ASGIApp, Receive, Scope, Send

from app.core.errors import ApiError, ErrorKind
from app.core.logs import request_id
from app.core.operator import ADMIN_API, Operator, acting
from app.credits.outcomes import Identity
from app.keys.format import bearer_secret
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


async def require_bearer(
    connection: ASGIConnection[Any, Any, Any, Any],
    expected: str | None,
    message: str,
    *,
    admin: bool = False,
) -> None:
    """Refuse (401, counted against the client address) a request that does not carry
    ``Authorization: Bearer <expected>``; an unset ``expected`` refuses everyone.
    ``admin``: the admin token, whose wrong values have a counter of their own (wrong API
    keys never lock the operator out), and an address over that limit is refused (429) the
    right token too (``FailedAuthThrottle.refuse_over_limit``)."""
    services = services_of(connection)
    given = bearer_secret(connection.headers.get("authorization")) or ""
    address = request_address(services, connection.scope)
    throttle = services.admin_throttle if admin else services.auth_throttle
    if admin:
        await throttle.refuse_over_limit(address)
    async with throttle.guarding(address):
        if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
            raise ApiError(ErrorKind.ADMIN_UNAUTHORIZED, message)


async def admin_guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Only the bearer of ``SVC_ADMIN_TOKEN`` passes."""
    expected = services_of(connection).settings.admin_token
    await require_bearer(connection, expected, "A valid admin token is required.", admin=True)
