"""svc's errors in Anthropic's shape, for the Messages API's routes.

A refused request is answered with the status svc answers it with on every route (the
``ApiError``'s), its headers (``retry-after``, ``x-should-retry``, …) and Anthropic's body
``{"type": "error", "error": {"type", "message"}, "request_id"}``, the error's type chosen
by status as Anthropic's API chooses it (the SDKs pick their exception by status, so the
type is for the reader). Anthropic's body has no ``param``: a message that does not name
the field at fault is prefixed with it.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from app.apis.dialect import ErrorAnswer, Header
from app.apis.messages.wire import AnthropicErrorBody, AnthropicErrorDetail
from app.core.errors import ApiError

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",  # every upstream failed: the request may be retried
    503: "overloaded_error",  # svc cannot take it now (retry-after says when to come back)
    504: "timeout_error",
}
"""Anthropic's error type of each status svc answers; another 4xx is an
``invalid_request_error``, another 5xx an ``api_error``."""


def error_type(status: int) -> str:
    """Anthropic's error type for an answer of ``status``."""
    known = ERROR_TYPES.get(status)
    if known is not None:
        return known
    return "invalid_request_error" if status < 500 else "api_error"


class ErrorResponse(NamedTuple):
    """A refusal as this route answers it: status, headers (the error's own among them),
    JSON body."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


def error_body(error: ApiError, request_id: str | None = None) -> bytes:
    """The JSON body of ``error`` in Anthropic's shape."""
    message = error.message
    if error.param and error.param not in message:
        message = f"{error.param}: {message}"
    detail = AnthropicErrorDetail(type=error_type(error.status), message=message)
    return msgspec.json.encode(AnthropicErrorBody(error=detail, request_id=request_id))


def error_response(error: ApiError, request_id: str) -> ErrorResponse:
    """``error`` answered on this route: Anthropic's body, its content type, the request id
    as Anthropic's ``request-id`` header, and the error's own headers (the caller adds the
    ones every answer has: ``content-length``, ``x-request-id``, the security headers)."""
    body = error_body(error, request_id)
    headers = [
        ("content-type", "application/json"),
        ("request-id", request_id),
        *error.headers.items(),
    ]
    return ErrorResponse(error.status, headers, body)


def anthropic_error(error: ApiError, rid: str) -> ErrorAnswer:
    """Anthropic's error shape, with its ``request-id`` header (the Messages API's routes)."""
    answer = error_response(error, rid)
    return ErrorAnswer(answer.body, answer.headers)


def bearer_or_api_key(header: Header) -> str | None:
    """``Authorization``, or else ``x-api-key`` (what Anthropic's SDKs, the Vercel AI SDK's
    provider and Claude Code send) read as the bearer of the same key."""
    authorization = header("authorization")
    if authorization is None:
        api_key = header("x-api-key")
        if api_key is not None:
            return "Bearer " + api_key
    return authorization
