"""One place where every failure becomes an OpenAI-shaped error response."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException

from app.core.errors import ApiError, ErrorKind, service_unavailable
from app.http.headers import SECURITY_HEADERS
from app.kv.client import REDIS_ERRORS
from app.store import StoreError

log = logging.getLogger("svc.http")

_BY_STATUS = {
    400: ErrorKind.INVALID_VALUE,
    401: ErrorKind.INVALID_API_KEY,
    404: ErrorKind.NOT_FOUND,
    405: ErrorKind.METHOD_NOT_ALLOWED,
    413: ErrorKind.REQUEST_TOO_LARGE,
}


def as_api_error(exc: Exception) -> ApiError:
    """The public error for any exception; internals never reach the message."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, (*REDIS_ERRORS, StoreError, ConnectionError)):
        log.warning("backend unavailable: %s", type(exc).__name__)
        return service_unavailable()
    if isinstance(exc, HTTPException):
        kind = _BY_STATUS.get(exc.status_code)
        if kind is not None:
            return ApiError(kind, _public_message(exc, kind))
    log.exception("unhandled error", exc_info=exc)
    return ApiError(ErrorKind.INTERNAL, "The server had an error processing your request.")


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
