"""What the OpenAPI document says of a streaming API's route, as plain data: granian serves
those routes, so Litestar cannot generate them and each dialect writes its own operation
(``Dialect.operation``) from these pieces; the errors and headers every route shares are
here too, for the routes Litestar does document (``app.http.openapi``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from app.completion.request import CLAMPED_HEADER
from app.core.errors import ErrorKind
from app.credits import ceilings
from app.credits.idempotency import MAX_KEY_CHARS

COMPONENT = "#/components/schemas/{name}"

API_KEY: list[dict[str, list[str]]] = [{"apiKey": []}]

# Errors any authenticated /v1 route can return before its own work.
KEY_ERRORS = (
    ErrorKind.INVALID_API_KEY,
    ErrorKind.API_KEY_REVOKED,
    ErrorKind.API_KEY_EXPIRED,
    ErrorKind.ACCOUNT_DISABLED,
    ErrorKind.AUTH_RATE_LIMITED,
    ErrorKind.SERVICE_UNAVAILABLE,
    ErrorKind.INTERNAL,
)
BODY_ERRORS = (ErrorKind.INVALID_VALUE, ErrorKind.REQUEST_TOO_LARGE)
# A route that takes an Idempotency-Key: its own run still going, or the key another body's.
IDEMPOTENT_ERRORS = (ErrorKind.IDEMPOTENCY_IN_PROGRESS, ErrorKind.IDEMPOTENCY_KEY_REUSED)
STREAM_ERRORS = (
    *KEY_ERRORS,
    *BODY_ERRORS,
    ErrorKind.STREAM_REQUIRED,
    ErrorKind.MODEL_NOT_FOUND,
    ErrorKind.MODEL_NOT_ALLOWED,
    ErrorKind.INSUFFICIENT_CREDITS,
    ErrorKind.ACCOUNT_IN_DEBT,
    ErrorKind.CREDIT_CEILING_TOO_LOW,
    ErrorKind.DAILY_CAP_EXCEEDED,
    ErrorKind.DAILY_CAP_HELD,
    ErrorKind.KEY_RATE_LIMITED,
    ErrorKind.UPSTREAM_UNAVAILABLE,
    *IDEMPOTENT_ERRORS,
    ErrorKind.IDEMPOTENCY_UNAVAILABLE,
)
"""What a stream may answer before its first byte."""


def parameter(name: str, where: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    """An optional parameter, as Litestar writes one (so the streams' and its own read the
    same): ``where``, ``header`` or ``query``."""
    written: dict[str, Any] = {"name": name, "in": where, "description": description}
    written.update(schema=schema, required=False, deprecated=False)
    if where == "query":
        written.update(allowEmptyValue=False, allowReserved=False)
    return written


IDEMPOTENCY_KEY = parameter(
    "Idempotency-Key",
    "header",
    "Run the request at most once for this key (per account, 24 hours); sent again with the "
    "same body, the first answer is replayed (`idempotent-replayed: true`).",
    {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS, "pattern": "^[ -~]+$"},
)
MAX_CREDITS = parameter(
    ceilings.HEADER,
    "header",
    "This request's credit ceiling: the most it may hold and be charged. The output cap is "
    "lowered to fit; a request whose prompt alone may cost more is 402 "
    "`credit_ceiling_too_low`. With the key's `max_credits_per_request`, the lower holds. "
    f"Not a whole number from 1 to {ceilings.MAX_CEILING:,}: 400 `invalid_value` "
    f"(`param` `{ceilings.HEADER}`).",
    {"type": "integer", "minimum": 1, "maximum": ceilings.MAX_CEILING},
)


def ref(name: str) -> dict[str, str]:
    """A reference to the component ``name``."""
    return {"$ref": COMPONENT.format(name=name)}


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def by_status(kinds: Iterable[ErrorKind]) -> dict[int, list[ErrorKind]]:
    grouped: dict[int, list[ErrorKind]] = {}
    for kind in kinds:
        if kind not in grouped.setdefault(kind.status, []):
            grouped[kind.status].append(kind)
    return dict(sorted(grouped.items()))


def describe_errors(kinds: Sequence[ErrorKind]) -> str:
    codes = ", ".join(f"`{kind.value[1]}` / `{kind.value[2]}`" for kind in kinds)
    return f"OpenAI-shaped error; type / code: {codes}."


def error_response(kinds: Sequence[ErrorKind]) -> dict[str, Any]:
    """A documented error response (``kinds``: of one status): the OpenAI error body."""
    return {"description": describe_errors(kinds), "content": json_content(ref("ErrorBody"))}


_CLAMPED = {
    "required": False,
    "description": (
        "The output limit the request was served with, when the one it asked for was above "
        "the alias's (`max_tokens`, `max_completion_tokens` or `max_output_tokens`) and was "
        "lowered to it. Absent otherwise."
    ),
    "schema": {"type": "string", "pattern": "^[1-9][0-9]*$"},
}


def operation(
    *,
    summary: str,
    description: str,
    operation_id: str,
    body: str,
    responses: dict[str, Any],
    errors: Sequence[ErrorKind],
    error_response: Callable[[Sequence[ErrorKind]], dict[str, Any]] = error_response,
    security: list[dict[str, list[str]]] = API_KEY,
    parameters: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """An operation taking the JSON body of component ``body``: its answers (``responses``)
    and those of ``errors``, one per status, in the API's shape (``error_response``: the
    response of the kinds of one status)."""
    answers = dict(responses)
    for status, group in by_status(errors).items():
        answers[str(status)] = error_response(group)
    return {
        "summary": summary,
        "description": description,
        "operationId": operation_id,
        "security": security,
        "parameters": list(parameters),
        "requestBody": {"required": True, "content": json_content(ref(body))},
        "responses": answers,
    }


def stream_operation(
    *,
    stream: str,
    event: dict[str, Any],
    headers: dict[str, Any] | None = None,
    parameters: Sequence[dict[str, Any]] = (),
    **options: Any,
) -> dict[str, Any]:
    """A streamed operation: its event stream (``stream``: described; ``event``: the schema
    of one event) and the errors it may answer before the first byte (``STREAM_ERRORS``);
    ``headers``: the 200's own, beside those of every stream (``CLAMPED_HEADER``);
    ``options``: the rest, as ``operation`` takes them."""
    ok = {
        "description": stream,
        "headers": {CLAMPED_HEADER: dict(_CLAMPED), **(headers or {})},
        "content": {"text/event-stream": {"schema": event}},
    }
    return operation(
        responses={"200": ok},
        errors=STREAM_ERRORS,
        parameters=[IDEMPOTENCY_KEY, MAX_CREDITS, *parameters],
        **options,
    )


def json_string(schema: dict[str, Any]) -> dict[str, Any]:
    """A string holding JSON of ``schema`` (an event's ``data``)."""
    return {"type": "string", "contentMediaType": "application/json", "contentSchema": schema}


def data_event(data: dict[str, Any]) -> dict[str, Any]:
    """One event whose ``data`` is described (and whose ``event`` line is not)."""
    return {"type": "object", "required": ["data"], "properties": {"data": data}}
