"""The OpenAPI document at ``/schema`` and ``/schema/openapi.json``.

Litestar generates it from the routes; handlers add what it cannot infer (their error
responses, security, the bodies and query parameters they decode themselves), and
``complete_document`` adds the rest once per worker: the chat route (served over RSGI), the
msgspec schemas of the request bodies and stream chunks, and the headers every response
carries. The schemathesis suite (tests/e2e/test_schemathesis.py) holds the server to it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Request
from litestar.enums import ParamType
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import (
    Components,
    OpenAPIFormat,
    OpenAPIMediaType,
    OpenAPIType,
    Operation,
    Parameter,
    Reference,
    RequestBody,
    Schema,
    SecurityRequirement,
    SecurityScheme,
)

from app import __version__
from app.chat.chunks import ChatCompletionChunk
from app.core.errors import ErrorBody, ErrorKind
from app.http.headers import SECURITY_HEADERS
from app.keys.format import ENVIRONMENTS
from app.responses.wire import ResponsesRequest
from app.upstream.wire import ChatRequest
from app.usage.activity import DEFAULT_LIMIT as ACTIVITY_DEFAULT_LIMIT
from app.usage.activity import MAX_LIMIT as ACTIVITY_MAX_LIMIT
from app.usage.activity import ActivityPage
from app.usage.export import CSV_MEDIA_TYPE, FORMATS
from app.usage.reader import DEFAULT_DAYS, GROUP_BY, MAX_DAYS, UsageSummary

API_KEY: list[SecurityRequirement] = [{"apiKey": []}]
ADMIN_TOKEN: list[SecurityRequirement] = [{"adminToken": []}]

# Errors any authenticated /v1 route can return before its own work.
KEY_ERRORS = (
    ErrorKind.INVALID_API_KEY,
    ErrorKind.API_KEY_REVOKED,
    ErrorKind.API_KEY_EXPIRED,
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
    ErrorKind.MODEL_NOT_FOUND,
    ErrorKind.MODEL_NOT_ALLOWED,
    ErrorKind.INSUFFICIENT_CREDITS,
    ErrorKind.DAILY_CAP_EXCEEDED,
    ErrorKind.KEY_RATE_LIMITED,
    ErrorKind.UPSTREAM_UNAVAILABLE,
    *IDEMPOTENT_ERRORS,
    ErrorKind.IDEMPOTENCY_UNAVAILABLE,
)


_COMPONENT = "#/components/schemas/{name}"
# No control, separator (but space) or format characters; str.isprintable, as a regex both
# ECMA 262 and Python read (no \\p{...}); unassigned code points still get a 400.
_PRINTABLE = (
    "^[^\\x00-\\x1f\\x7f-\\xa0\\xad\\u2000-\\u200f\\u2028-\\u202f\\u205f-\\u206f"
    "\\ue000-\\uf8ff\\ufeff]*$"
)
_BODY_TYPES: dict[str, type[msgspec.Struct]] = {}  # filled by ``documented``

# Headers an error may carry besides the security headers (docs/api.md, Errors).
_ERROR_HEADERS: dict[ErrorKind, dict[str, str]] = {
    ErrorKind.INSUFFICIENT_CREDITS: {"x-should-retry": "Always `false`."},
    ErrorKind.DAILY_CAP_EXCEEDED: {
        "x-should-retry": "Always `false`.",
        "retry-after": "Seconds until the key's cap resets at UTC midnight.",
    },
    ErrorKind.SPOTLIGHT_LIMIT: {"x-should-retry": "Always `false`."},
    ErrorKind.UPSTREAM_UNAVAILABLE: {"x-should-retry": "Always `true`: retry the request."},
    ErrorKind.SERVICE_UNAVAILABLE: {"retry-after": "Seconds to wait before retrying."},
    ErrorKind.AUTH_RATE_LIMITED: {
        "retry-after": "Seconds to wait before retrying.",
        "x-should-retry": "`false` when the client address failed authentication too often.",
    },
    ErrorKind.IDEMPOTENCY_IN_PROGRESS: {"retry-after": "Seconds to wait before retrying."},
    ErrorKind.IDEMPOTENCY_UNAVAILABLE: {"x-should-retry": "Always `false`."},
    ErrorKind.KEY_RATE_LIMITED: {
        "retry-after": "Seconds (rounded up) until the oldest of the key's starts in the last "
        "minute is a minute old.",
        "retry-after-ms": "The same, in milliseconds.",
    },
}


def _by_status(kinds: Iterable[ErrorKind]) -> dict[int, list[ErrorKind]]:
    grouped: dict[int, list[ErrorKind]] = {}
    for kind in kinds:
        if kind not in grouped.setdefault(kind.status, []):
            grouped[kind.status].append(kind)
    return dict(sorted(grouped.items()))


def _description(kinds: Sequence[ErrorKind]) -> str:
    codes = ", ".join(f"`{kind.value[1]}` / `{kind.value[2]}`" for kind in kinds)
    return f"OpenAI-shaped error; type / code: {codes}."


def errors(*kinds: ErrorKind) -> dict[int, ResponseSpec]:
    """A handler's documented error responses (``responses=``), one per status."""
    return {
        status: ResponseSpec(
            data_container=ErrorBody, generate_examples=False, description=_description(group)
        )
        for status, group in _by_status(kinds).items()
    }


def documented(
    *, body: type[msgspec.Struct] | None = None, parameters: Sequence[Parameter] = ()
) -> type[Operation]:
    """An ``operation_class`` for a handler that decodes its own body, query or headers (so
    its errors stay OpenAI-shaped and name the field): documents what it reads."""
    if body is not None:
        _BODY_TYPES[body.__name__] = body

    @dataclass
    class DocumentedOperation(Operation):
        def __post_init__(self) -> None:
            if body is not None:
                ref = Reference(ref=_COMPONENT.format(name=body.__name__))
                content = {"application/json": OpenAPIMediaType(schema=ref)}
                self.request_body = RequestBody(content=content, required=True)
            if parameters:
                self.parameters = [*(self.parameters or []), *parameters]

    return DocumentedOperation


DAYS = Parameter(
    name="days",
    param_in=ParamType.QUERY,
    required=False,
    description=f"Days in the `daily` window, newest first (default {DEFAULT_DAYS}).",
    schema=Schema(type=OpenAPIType.INTEGER, minimum=1, maximum=MAX_DAYS, default=DEFAULT_DAYS),
)
IDEMPOTENCY_KEY = Parameter(
    name="Idempotency-Key",
    param_in=ParamType.HEADER,
    required=False,
    description=(
        "Run the request at most once for this key (per account, 24 hours); sent again "
        "with the same body, the first answer is replayed (`idempotent-replayed: true`)."
    ),
    schema=Schema(type=OpenAPIType.STRING, min_length=1, max_length=255, pattern="^[ -~]+$"),
)
GROUP_BY_PARAM = Parameter(
    name="group_by",
    param_in=ParamType.QUERY,
    required=False,
    description=(
        "Break each day down: every `daily` item gains `groups`, its usage by that value "
        "(`key`: `key_id`, each API key that was used; `model`: `model`, each model "
        "served; `api`: `chat` for chat completions, `responses` for the Responses API); "
        "the groups sum to the day."
    ),
    schema=Schema(type=OpenAPIType.STRING, enum=list(GROUP_BY)),
)
FORMAT_PARAM = Parameter(
    name="format",
    param_in=ParamType.QUERY,
    required=False,
    description=(
        "`csv`: the days as `text/csv` rows (`day`, the `group_by` column when given, "
        "`requests_count`, `total_tokens`, `credits_spent`), newest first."
    ),
    schema=Schema(type=OpenAPIType.STRING, enum=list(FORMATS), default="json"),
)

ACTIVITY_PARAMS = [
    Parameter(
        name="limit",
        param_in=ParamType.QUERY,
        required=False,
        description=(
            f"Rows in the page (default {ACTIVITY_DEFAULT_LIMIT}); with `format=csv`, rows "
            "in the export (default: all of them)."
        ),
        schema=Schema(type=OpenAPIType.INTEGER, minimum=1, maximum=ACTIVITY_MAX_LIMIT),
    ),
    Parameter(
        name="after",
        param_in=ParamType.QUERY,
        required=False,
        description="The `id` of the last row of the previous page (its `last_id`).",
        schema=Schema(type=OpenAPIType.STRING),
    ),
    Parameter(
        name="key_id",
        param_in=ParamType.QUERY,
        required=False,
        description="Only the requests made with this key (`key_…`).",
        schema=Schema(type=OpenAPIType.STRING),
    ),
    Parameter(
        name="model",
        param_in=ParamType.QUERY,
        required=False,
        description="Only the requests this model served.",
        schema=Schema(type=OpenAPIType.STRING),
    ),
    Parameter(
        name="day",
        param_in=ParamType.QUERY,
        required=False,
        description="Only the requests that started on this UTC day.",
        schema=Schema(type=OpenAPIType.STRING, format=OpenAPIFormat.DATE),
    ),
    Parameter(
        name="format",
        param_in=ParamType.QUERY,
        required=False,
        description=(
            "`csv`: the rows as `text/csv` (a header row, then one row per request, newest "
            "first, `created` as an ISO 8601 UTC time)."
        ),
        schema=Schema(type=OpenAPIType.STRING, enum=list(FORMATS), default="json"),
    ),
]

ENVIRONMENT_PARAM = Parameter(
    name="environment",
    param_in=ParamType.QUERY,
    required=False,
    description="The requests of the account's live keys (default) or of its test keys.",
    schema=Schema(type=OpenAPIType.STRING, enum=list(ENVIRONMENTS), default="live"),
)


def openapi_config() -> OpenAPIConfig:
    """Litestar's OpenAPI settings: the document is served at ``/schema`` and
    ``/schema/openapi.json`` (no HTML viewer: the API's CSP forbids its scripts)."""
    return OpenAPIConfig(
        title="svc",
        version=__version__,
        description="Credit-metered, OpenAI-compatible chat completions (streaming only).",
        use_handler_docstrings=True,
        components=Components(
            security_schemes={
                "apiKey": SecurityScheme(
                    type="http",
                    scheme="bearer",
                    bearer_format="svc_live_… or svc_test_… API key",
                    description="An svc API key: `Authorization: Bearer <key>`.",
                ),
                "adminToken": SecurityScheme(
                    type="http",
                    scheme="bearer",
                    description="The operator token (`SVC_ADMIN_TOKEN`).",
                ),
            }
        ),
        render_plugins=[CompleteJson()],
    )


class CompleteJson(JsonRenderPlugin):
    """Serves the completed document; builds it once per worker."""

    def __init__(self) -> None:
        super().__init__(path=["/openapi.json", "/"])
        self._rendered: bytes | None = None

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        if self._rendered is None:
            services = request.app.state.services
            aliases = [a.id for a in services.aliases.values() if a.enabled]
            settings = services.settings
            document = complete_document(
                openapi_schema,
                models=aliases,
                key_models=list(services.accounts.model_ids),
                max_messages=settings.max_messages,
                max_message_chars=settings.max_message_chars,
            )
            self._rendered = self.render_json(request, document)
        return self._rendered


def complete_document(
    generated: Mapping[str, Any],
    *,
    models: list[str],
    key_models: list[str],
    max_messages: int,
    max_message_chars: int,
) -> dict[str, Any]:
    """Litestar's generated document plus what it cannot see (see the module docstring).
    ``models``: the aliases a request may name; ``key_models``: those a key's
    ``allowed_models`` may."""
    document = copy.deepcopy(dict(generated))
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    types = [
        ChatRequest,
        ResponsesRequest,
        ChatCompletionChunk,
        ErrorBody,
        UsageSummary,
        ActivityPage,
        *_BODY_TYPES.values(),
    ]
    _, components = msgspec.json.schema_components(types, ref_template=_COMPONENT)
    for name, schema in components.items():
        schemas.setdefault(name, schema)
    _constrain(schemas, models, max_messages, max_message_chars)
    for body in ("KeyCreateRequest", "KeyUpdateRequest"):
        allowed = schemas[body]["properties"]["allowed_models"]["anyOf"][0]
        allowed["items"]["enum"] = key_models
    document["paths"]["/v1/chat/completions"] = {"post": _chat_operation()}
    document["paths"]["/v1/responses"] = {"post": _responses_operation()}
    # the handler answers JSON or, with format=csv, a CSV stream (its annotation says neither)
    for path, body in (
        ("/v1/usage", "UsageSummary"),
        ("/v1/activity", "ActivityPage"),
        ("/admin/v1/accounts/{pid}/activity", "ActivityPage"),
    ):
        document["paths"][path]["get"]["responses"]["200"]["content"] = {
            "application/json": {"schema": {"$ref": _COMPONENT.format(name=body)}},
            CSV_MEDIA_TYPE: {"schema": {"type": "string"}},
        }
    for path_item in document["paths"].values():
        for operation in path_item.values():
            for status, response in operation.get("responses", {}).items():
                # Litestar documents its own validation error body; the exception handler
                # answers those in the OpenAI shape, so the document says that instead.
                if int(status) == 400 and "$ref" not in _json_schema(response):
                    response.update(_error_response([ErrorKind.INVALID_VALUE]))
                response["headers"] = _headers(int(status), response.get("headers", {}))
    return document


def _json_schema(response: Mapping[str, Any]) -> Mapping[str, Any]:
    schema: Mapping[str, Any] = response.get("content", {}).get("application/json", {})
    return schema.get("schema", {})  # type: ignore[no-any-return]


def _error_response(kinds: Sequence[ErrorKind]) -> dict[str, Any]:
    """A documented error response: the OpenAI error body."""
    schema = {"$ref": _COMPONENT.format(name="ErrorBody")}
    return {"description": _description(kinds), "content": {"application/json": {"schema": schema}}}


def _constrain(
    schemas: dict[str, Any], models: list[str], max_messages: int, max_message_chars: int
) -> None:
    """Limits the handlers check after decoding, so the schema states them too."""
    chat = schemas["ChatRequest"]["properties"]
    for body in ("ChatRequest", "ResponsesRequest"):
        model = {"type": "string", "enum": models, "description": "A model alias."}
        schemas[body]["properties"]["model"] = model
    chat["messages"].update(minItems=1, maxItems=max_messages)
    for field in ("max_tokens", "max_completion_tokens"):
        chat[field]["description"] = "At most the alias's output limit (400 above it)."
    message = schemas["Message"]
    message["properties"]["content"]["anyOf"][0]["maxLength"] = max_message_chars
    message["properties"]["content"]["description"] = (
        "Text or content parts (null: assistant only)."
    )
    message["if"] = {"properties": {"role": {"const": "assistant"}}}
    not_null = {"content": {"not": {"type": "null"}}}
    message["else"] = {"required": ["content"], "properties": not_null}
    # str.isprintable, which no annotation states, as a pattern (the lengths are in the types)
    for body in ("KeyCreateRequest", "KeyUpdateRequest"):
        name = schemas[body]["properties"]["name"]
        name.update(pattern=_PRINTABLE, description="Printable characters.")
    view_id = schemas["SpotlightRequest"]["properties"]["view_id"]
    view_id.update(pattern=_PRINTABLE, description="Printable characters.")


def _headers(status: int, documented: dict[str, Any]) -> dict[str, Any]:
    """Every response's headers: the security headers (fixed values), plus what an error of
    that status may carry."""
    headers = dict(documented)
    for name, value in SECURITY_HEADERS:
        headers[name] = {"required": True, "schema": {"type": "string", "const": value}}
    for kind, extra in _ERROR_HEADERS.items():
        if kind.status == status:
            for name, text in extra.items():
                headers.setdefault(name, {"required": False, "description": text})
                headers[name]["schema"] = {"type": "string"}
    return headers


_DONE = {"const": "[DONE]", "description": "The last event."}
_JSON_EVENT = {
    "type": "string",
    "contentMediaType": "application/json",
    "contentSchema": {
        "anyOf": [
            {"$ref": _COMPONENT.format(name="ChatCompletionChunk")},
            {"$ref": _COMPONENT.format(name="ErrorBody")},
        ]
    },
}
_STREAM_DOC = (
    "A Server-Sent Events stream. The schema describes one event: its `data` is a JSON "
    "`chat.completion.chunk` (content chunks; the last has `finish_reason` `stop`; then one "
    "chunk with empty `choices` and the `svc` object), an OpenAI error object when the "
    "upstream fails mid-stream, or the terminator `[DONE]`."
)


def _chat_operation() -> dict[str, Any]:
    """``POST /v1/chat/completions``, served outside Litestar, which does not document it."""
    return _stream_operation(
        summary="Create a chat completion (streamed)",
        description=(
            "Reserves credits, streams the completion as Server-Sent Events, then settles to "
            "actual use. Always streams; `stream` is accepted and ignored. Unknown fields are "
            "ignored. Errors before the first byte are JSON."
        ),
        operation_id="CreateChatCompletion",
        body="ChatRequest",
        stream=_STREAM_DOC,
        data={"anyOf": [_DONE, _JSON_EVENT]},
    )


_RESPONSES_STREAM_DOC = (
    "A Server-Sent Events stream of Responses API events (docs/api.md, Responses): each "
    "`data` a JSON event with its `type` and a `sequence_number` counting from 0, from "
    "`response.created` to `response.completed`, `response.incomplete` or `response.failed` "
    "(whose `response` carries the usage and the `svc` object)."
)
_RESPONSES_EVENT = {
    "type": "string",
    "contentMediaType": "application/json",
    "contentSchema": {
        "type": "object",
        "required": ["type", "sequence_number"],
        "properties": {
            "type": {"type": "string", "pattern": "^response\\."},
            "sequence_number": {"type": "integer", "minimum": 0},
        },
    },
}


def _responses_operation() -> dict[str, Any]:
    """``POST /v1/responses``, served outside Litestar as chat completions are."""
    return _stream_operation(
        summary="Create a response (the Responses API, streamed)",
        description=(
            "The Responses API on the chat completion path: the same keys, prices, caps, "
            "reservation and settlement. Always streams; `stream` is accepted and ignored; "
            "every response is `store: false`. Fields that need stored state, hosted tools "
            "and `background: true` are a 400 naming them. Unknown fields are ignored. Errors "
            "before the first byte are JSON."
        ),
        operation_id="CreateResponse",
        body="ResponsesRequest",
        stream=_RESPONSES_STREAM_DOC,
        data=_RESPONSES_EVENT,
    )


def _stream_operation(
    *,
    summary: str,
    description: str,
    operation_id: str,
    body: str,
    stream: str,
    data: dict[str, Any],
) -> dict[str, Any]:
    """A streamed operation: its request body, its event stream and the errors it may
    answer before the first byte (``CHAT_ERRORS``)."""
    responses: dict[str, Any] = {
        "200": {
            "description": stream,
            "content": {
                "text/event-stream": {
                    "schema": {
                        "type": "object",
                        "required": ["data"],
                        "properties": {"data": data},
                    }
                }
            },
        }
    }
    for status, group in _by_status(CHAT_ERRORS).items():
        responses[str(status)] = _error_response(group)
    return {
        "summary": summary,
        "description": description,
        "operationId": operation_id,
        "security": API_KEY,
        "parameters": [IDEMPOTENCY_KEY.to_schema()],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": _COMPONENT.format(name=body)}}},
        },
        "responses": responses,
    }
