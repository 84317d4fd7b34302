"""What the handlers say of themselves in the OpenAPI document at ``/schema`` and
``/schema/openapi.json``: their error responses, security, and the bodies and headers they
decode themselves (so Litestar, which generates the document from the routes, cannot infer
them; the query parameters it documents from ``app.http.queries``).

``app.http.openapi_document`` adds the rest once per worker (the routes served over RSGI,
described in ``app.http.openapi_streams``; the msgspec schemas; the headers every response
carries). The schemathesis suite (tests/e2e/test_schemathesis.py) holds the server to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar.enums import ParamType
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import (
    OpenAPIMediaType,
    OpenAPIType,
    Operation,
    Parameter,
    Reference,
    RequestBody,
    Schema,
    SecurityRequirement,
)

from app.apis.messages.errors import error_type
from app.core.errors import ErrorBody, ErrorKind
from app.credits import ceilings, idempotency

API_KEY: list[SecurityRequirement] = [{"apiKey": []}]
# The Messages API's routes take the key as Anthropic's clients send it, or as a bearer.
API_KEY_OR_X_API_KEY: list[SecurityRequirement] = [{"apiKey": []}, {"xApiKey": []}]
ADMIN_TOKEN: list[SecurityRequirement] = [{"adminToken": []}]

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
ADMIN_ERRORS = (
    ErrorKind.ADMIN_UNAUTHORIZED,
    ErrorKind.AUTH_RATE_LIMITED,
    ErrorKind.SERVICE_UNAVAILABLE,
    ErrorKind.INTERNAL,
)
BODY_ERRORS = (ErrorKind.INVALID_VALUE, ErrorKind.REQUEST_TOO_LARGE)
# A route that takes an Idempotency-Key: its own run still going, or the key another body's.
IDEMPOTENT_ERRORS = (ErrorKind.IDEMPOTENCY_IN_PROGRESS, ErrorKind.IDEMPOTENCY_KEY_REUSED)
CHAT_ERRORS = (
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
# ``POST /v1/messages/count_tokens``: the key, the body, its model and the key's rate limit;
# nothing is reserved.
COUNT_TOKENS_ERRORS = (
    *KEY_ERRORS,
    *BODY_ERRORS,
    ErrorKind.MODEL_NOT_FOUND,
    ErrorKind.MODEL_NOT_ALLOWED,
    ErrorKind.KEY_RATE_LIMITED,
)


COMPONENT = "#/components/schemas/{name}"
# No control, separator (but space) or format characters; str.isprintable, as a regex both
# ECMA 262 and Python read (no \\p{...}); unassigned code points still get a 400.
PRINTABLE = (
    "^[^\\x00-\\x1f\\x7f-\\xa0\\xad\\u2000-\\u200f\\u2028-\\u202f\\u205f-\\u206f"
    "\\ue000-\\uf8ff\\ufeff]*$"
)
BODY_TYPES: dict[str, type[msgspec.Struct]] = {}  # filled by ``documented``


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
    """A documented error response, as a document's dict: the OpenAI error body."""
    schema = {"$ref": COMPONENT.format(name="ErrorBody")}
    content = {"application/json": {"schema": schema}}
    return {"description": describe_errors(kinds), "content": content}


def request_id_header() -> dict[str, Any]:
    """Anthropic's ``request-id`` header, which the Messages API's routes answer with."""
    text = "The request's id (as `x-request-id`), where Anthropic's SDKs read it."
    return {"request-id": {"required": True, "description": text, "schema": {"type": "string"}}}


def anthropic_error_response(kinds: Sequence[ErrorKind], body: str) -> dict[str, Any]:
    """A documented error response of the Messages API's routes (``kinds``: of one status):
    Anthropic's error body (component ``body``), its ``error.type`` the one of that status,
    and Anthropic's ``request-id`` header."""
    kind_type = error_type(kinds[0].status)
    schema = {
        "allOf": [
            {"$ref": COMPONENT.format(name=body)},
            {"properties": {"error": {"properties": {"type": {"const": kind_type}}}}},
        ]
    }
    codes = ", ".join(f"`{kind.code}`" for kind in kinds)
    return {
        "description": f"Anthropic-shaped error of type `{kind_type}`; svc's reasons: {codes}.",
        "headers": request_id_header(),
        "content": {"application/json": {"schema": schema}},
    }


def errors(*kinds: ErrorKind) -> dict[int, ResponseSpec]:
    """A handler's documented error responses (``responses=``), one per status."""
    return {
        status: ResponseSpec(
            data_container=ErrorBody, generate_examples=False, description=describe_errors(group)
        )
        for status, group in by_status(kinds).items()
    }


def documented(
    *, body: type[msgspec.Struct] | None = None, parameters: Sequence[Parameter] = ()
) -> type[Operation]:
    """An ``operation_class`` for a handler that decodes its own body or headers (so its
    errors stay OpenAI-shaped and name the field): documents what it reads."""
    if body is not None:
        BODY_TYPES[body.__name__] = body

    @dataclass
    class DocumentedOperation(Operation):
        def __post_init__(self) -> None:
            if body is not None:
                ref = Reference(ref=COMPONENT.format(name=body.__name__))
                content = {"application/json": OpenAPIMediaType(schema=ref)}
                self.request_body = RequestBody(content=content, required=True)
            if parameters:
                self.parameters = [*(self.parameters or []), *parameters]

    return DocumentedOperation


IDEMPOTENCY_KEY = Parameter(
    name="Idempotency-Key",
    param_in=ParamType.HEADER,
    required=False,
    description=(
        "Run the request at most once for this key (per account, 24 hours); sent again "
        "with the same body, the first answer is replayed (`idempotent-replayed: true`)."
    ),
    schema=Schema(
        type=OpenAPIType.STRING,
        min_length=1,
        max_length=idempotency.MAX_KEY_CHARS,
        pattern="^[ -~]+$",
    ),
)
MAX_CREDITS = Parameter(
    name=ceilings.HEADER,
    param_in=ParamType.HEADER,
    required=False,
    description=(
        "This request's credit ceiling: the most it may hold and be charged. The output cap "
        "is lowered to fit; a request whose prompt alone may cost more is 402 "
        "`credit_ceiling_too_low`. With the key's `max_credits_per_request`, the lower "
        f"holds. Not a whole number from 1 to {ceilings.MAX_CEILING:,}: 400 `invalid_value` "
        f"(`param` `{ceilings.HEADER}`)."
    ),
    schema=Schema(type=OpenAPIType.INTEGER, minimum=1, maximum=ceilings.MAX_CEILING),
)
ANTHROPIC_PARAMS = [
    Parameter(
        name="anthropic-version",
        param_in=ParamType.HEADER,
        required=False,
        description="Anthropic's API version (the SDKs send `2023-06-01`): accepted, ignored.",
        schema=Schema(type=OpenAPIType.STRING),
    ),
    Parameter(
        name="anthropic-beta",
        param_in=ParamType.HEADER,
        required=False,
        description="Anthropic's beta features, comma-separated: accepted, ignored.",
        schema=Schema(type=OpenAPIType.STRING),
    ),
    Parameter(
        name="beta",
        param_in=ParamType.QUERY,
        required=False,
        description="What the SDKs' beta clients add (`beta=true`): accepted, ignored.",
        schema=Schema(type=OpenAPIType.BOOLEAN),
    ),
]
