"""What the handlers say of themselves in the OpenAPI document at ``/schema`` and
``/schema/openapi.json``: their error responses, security, and the bodies and headers they
decode themselves (so Litestar, which generates the document from the routes, cannot infer
them; the query parameters it documents from ``app.http.queries``).

``app.http.openapi_document`` adds the rest once per worker (the dialects' routes, whose
operations their dialects write; the msgspec schemas; the headers every response
carries). The errors and headers the routes share are ``app.apis.operation``'s. The
schemathesis suite (tests/e2e/test_schemathesis.py) holds the server to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import msgspec
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import (
    OpenAPIMediaType,
    Operation,
    Parameter,
    Reference,
    RequestBody,
    SecurityRequirement,
)

from app.apis.operation import COMPONENT, by_status, describe_errors
from app.core.errors import ErrorBody, ErrorKind

ADMIN_TOKEN: list[SecurityRequirement] = [{"adminToken": []}]

ADMIN_ERRORS = (
    ErrorKind.ADMIN_UNAUTHORIZED,
    ErrorKind.AUTH_RATE_LIMITED,
    ErrorKind.SERVICE_UNAVAILABLE,
    ErrorKind.INTERNAL,
)
# No control, separator (but space) or format characters; str.isprintable, as a regex both
# ECMA 262 and Python read (no \\p{...}); unassigned code points still get a 400.
PRINTABLE = (
    "^[^\\x00-\\x1f\\x7f-\\xa0\\xad\\u2000-\\u200f\\u2028-\\u202f\\u205f-\\u206f"
    "\\ue000-\\uf8ff\\ufeff]*$"
)
BODY_TYPES: dict[str, type[msgspec.Struct]] = {}  # filled by ``documented``


def errors(*kinds: ErrorKind) -> dict[int, ResponseSpec]:
    """A handler's documented error responses (``responses=``), one per status."""
    return {
        status: ResponseSpec(
            data_container=ErrorBody, generate_examples=False, description=describe_errors(group)
        )
        for status, group in by_status(kinds).items()
    }


def documented(
    *, body: type[msgspec.Struct] | None = None, parameters: Sequence[Mapping[str, Any]] = ()
) -> type[Operation]:
    """An ``operation_class`` for a handler that decodes its own body or headers (so its
    errors stay OpenAI-shaped and name the field): documents what it reads (``parameters``:
    as the document's dicts, ``app.apis.operation``'s, which the streams' operations share;
    Litestar writes a dict into the document as it is)."""
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
                given = cast("list[Parameter | Reference]", list(parameters))
                self.parameters = [*(self.parameters or []), *given]

    return DocumentedOperation
