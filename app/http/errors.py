"""One place where every failure becomes an OpenAI-shaped error response."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException

from app.core.errors import ApiError, ErrorKind
from app.http.headers import SECURITY_HEADERS
from app.runtime import public_error

log = logging.getLogger("svc.http")

_BY_STATUS = {
    400: ErrorKind.INVALID_VALUE,
    401: ErrorKind.INVALID_API_KEY,
    404: ErrorKind.NOT_FOUND,
    405: ErrorKind.METHOD_NOT_ALLOWED,
    413: ErrorKind.REQUEST_TOO_LARGE,
}


def as_api_error(exc: Exception) -> ApiError:
    """The public error for any exception, Litestar's own included; internals never reach
    the message."""
    if isinstance(exc, HTTPException):
        kind = _BY_STATUS.get(exc.status_code)
        if kind is not None:
            return ApiError(kind, _public_message(exc, kind))
    return public_error(exc)


def _public_message(exc: HTTPException, kind: ErrorKind) -> str:
    if kind is ErrorKind.NOT_FOUND:
        return "Unknown request URL. Check the path and method."
    if kind is ErrorKind.METHOD_NOT_ALLOWED:
        return "Method not allowed for this URL."
    if kind is ErrorKind.REQUEST_TOO_LARGE:
        return "The request body is too large."
    return str(exc.detail)[:200]


def error_response(error: ApiError) -> Response[bytes]:
    return Response(
        content=error.body(),
        status_code=error.status,
        media_type="application/json",
        headers={**dict(SECURITY_HEADERS), **error.headers},
    )


def handle_exception(_: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    """Litestar exception handler for every route."""
    return error_response(as_api_error(exc))
