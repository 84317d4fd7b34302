"""Dependencies shared by the Litestar routes."""

from __future__ import annotations

import hmac
from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from app.errors import ApiError, ErrorKind
from app.keys import bearer_secret
from app.ledger import Identity
from app.runtime import Services


def services_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Services:
    services: Services = connection.app.state.services
    return services


async def provide_services(request: Request[Any, Any, Any]) -> Services:
    return services_of(request)


async def provide_identity(request: Request[Any, Any, Any]) -> Identity:
    """The authenticated key, checked for revocation."""
    return await services_of(request).auth.authorize(request.headers.get("authorization"))


async def admin_guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Only the bearer of ``SVC_ADMIN_TOKEN`` passes."""
    expected = services_of(connection).settings.admin_token or ""
    given = bearer_secret(connection.headers.get("authorization")) or ""
    if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        raise ApiError(ErrorKind.ADMIN_UNAUTHORIZED, "A valid admin token is required.")
