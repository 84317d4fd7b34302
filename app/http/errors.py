"""One place where every failure becomes an error response: OpenAI-shaped, or in the shape
of the dialect whose route it is (``shaped_handler``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, InternalServerException

from app.apis.dialect import ErrorShape
from app.core.errors import ApiError, ErrorKind
from app.core.logs import request_id
from app.core.metrics import METRICS
from app.http.headers import SECURITY_HEADERS
from app.runtime import public_error

log = logging.getLogger("svc.http")

CLIENT_CLOSED_REQUEST = 499
"""The status a request counts as when its client left before sending its whole body
(nginx's "client closed request"): no answer goes out, and it is no server error."""
# Litestar's words when its body read meets the client's ``http.disconnect`` (the ASGI
# adapter's answer to a body cut short): the one sign Litestar gives of it.
_CLIENT_LEFT = "client disconnected prematurely"

_BY_STATUS = {
    400: ErrorKind.INVALID_VALUE,
    401: ErrorKind.INVALID_API_KEY,
    404: ErrorKind.NOT_FOUND,
    405: ErrorKind.METHOD_NOT_ALLOWED,
    413: ErrorKind.REQUEST_TOO_LARGE,
}


def request_too_large(limit: int) -> ApiError:
    """A request body past ``limit`` bytes (refused before it is all read)."""
    return ApiError(ErrorKind.REQUEST_TOO_LARGE, f"The request body is larger than {limit} bytes.")


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


def client_left(exc: Exception) -> bool:
    """Whether ``exc`` is Litestar's body read finding that the client left mid-upload."""
    return isinstance(exc, InternalServerException) and exc.detail == _CLIENT_LEFT


def handle_exception(_: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    """Litestar exception handler for every route."""
    if client_left(exc):
        # Clients do this (a timeout, a cancelled upload); nobody is left to answer
        log.info("client disconnected before sending the whole request body")
        return Response(content=b"", status_code=CLIENT_CLOSED_REQUEST)
    return error_response(as_api_error(exc))


ExceptionHandler = Callable[[Request[Any, Any, Any], Exception], Response[bytes]]


def shaped_handler(shape: ErrorShape) -> ExceptionHandler:
    """A Litestar exception handler answering in ``shape``, a dialect's, with the request id
    it names (``ErrorShape``), for the routes a dialect answers beside its stream; a refusal
    is counted as the streams count theirs."""

    def handle(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
        if client_left(exc):
            return handle_exception(request, exc)
        error = as_api_error(exc)
        METRICS.labelled(METRICS.rejections, error.kind.code).inc()
        answer = shape(error, request_id.get() or "")
        headers = dict(SECURITY_HEADERS)
        media_type = "application/json"
        for name, value in answer.headers:
            if name == "content-type":
                media_type = value
            else:
                headers[name] = value
        return Response(
            answer.body, status_code=error.status, media_type=media_type, headers=headers
        )

    return handle
