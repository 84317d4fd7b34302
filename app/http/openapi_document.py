"""The OpenAPI document as served: Litestar's generated one, completed once per worker with
what it cannot see (the routes whose operations their dialects write: the streams, served
over RSGI, and the JSON routes beside them, the Messages API's token count, in an error
shape of their own; the msgspec schemas of the request bodies,
stream chunks and events; the limits the handlers check after decoding; the headers every
response carries)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, get_args

import msgspec
from litestar import Request
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme

from app import __version__
from app.apis.chat.chunks import ChatCompletionChunk
from app.apis.messages import wire as messages
from app.apis.messages.request import MAX_STOP_SEQUENCES
from app.apis.operation import COMPONENT, error_response, ref
from app.apis.responses.wire import ResponsesRequest
from app.books.figures import Books
from app.completion.request import CLAMPED_HEADER
from app.core.errors import ErrorBody, ErrorKind
from app.http.headers import SECURITY_HEADERS
from app.http.openapi import BODY_TYPES, PRINTABLE
from app.http.streams import STREAMS
from app.upstream.wire import ChatRequest
from app.usage.activity import ActivityPage
from app.usage.export import CSV_MEDIA_TYPE
from app.usage.reader import UsageSummary


def openapi_config() -> OpenAPIConfig:
    """Litestar's OpenAPI settings: the document is served at ``/schema`` and
    ``/schema/openapi.json`` (no HTML viewer: the API's CSP forbids its scripts)."""
    return OpenAPIConfig(
        title="svc",
        version=__version__,
        description=(
            "Credit-metered, OpenAI-compatible chat completions, the Responses API and "
            "Anthropic's Messages API (streaming only)."
        ),
        use_handler_docstrings=True,
        components=Components(
            security_schemes={
                "apiKey": SecurityScheme(
                    type="http",
                    scheme="bearer",
                    bearer_format="svc_live_… or svc_test_… API key",
                    description="An svc API key: `Authorization: Bearer <key>`.",
                ),
                "xApiKey": SecurityScheme(
                    type="apiKey",
                    name="x-api-key",
                    security_scheme_in="header",
                    description="An svc API key as Anthropic's clients send theirs: "
                    "`x-api-key: <key>` (the Messages API's routes only).",
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
                key_models=list(services.api_keys.model_ids),
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
        messages.MessagesRequest,
        messages.CountTokensRequest,
        *get_args(messages.StreamEvent),
        messages.CountTokensResponse,
        messages.AnthropicErrorBody,
        UsageSummary,
        ActivityPage,
        Books,
        *BODY_TYPES.values(),
    ]
    _, components = msgspec.json.schema_components(types, ref_template=COMPONENT)
    for name, schema in components.items():
        schemas.setdefault(name, schema)
    _constrain(schemas, models, max_messages, max_message_chars)
    for body in ("KeyCreateRequest", "KeyUpdateRequest"):
        allowed = schemas[body]["properties"]["allowed_models"]["anyOf"][0]
        allowed["items"]["enum"] = key_models
    for answer in ("ApiKeyCreated", "ApiKeyItem"):
        ceiling = schemas[answer]["properties"]["max_credits_per_request"]
        ceiling["description"] = (
            "The most credits one request of the key may hold and be charged (a request's "
            "`svc-max-credits` header may set less); null: no ceiling."
        )
    # the handler answers JSON or, with format=csv, a CSV stream (its annotation says neither)
    for path, body in (
        ("/v1/usage", "UsageSummary"),
        ("/v1/activity", "ActivityPage"),
        ("/admin/v1/accounts/{pid}/activity", "ActivityPage"),
        ("/admin/v1/books", "Books"),
    ):
        document["paths"][path]["get"]["responses"]["200"]["content"] = {
            "application/json": {"schema": ref(body)},
            CSV_MEDIA_TYPE: {"schema": {"type": "string"}},
        }
    for path_item in document["paths"].values():
        for operation in path_item.values():
            for status, response in operation.get("responses", {}).items():
                # Litestar documents its own validation error body; the exception handler
                # answers those in the OpenAI shape, so the document says that instead.
                content = response.get("content", {}).get("application/json", {})
                if int(status) == 400 and "$ref" not in content.get("schema", {}):
                    response.update(error_response([ErrorKind.INVALID_VALUE]))
    document["paths"].update(_written_by_dialects())
    for path_item in document["paths"].values():
        for operation in path_item.values():
            for status, response in operation.get("responses", {}).items():
                response["headers"] = _headers(int(status), response.get("headers", {}))
    return document


def _written_by_dialects() -> dict[str, Any]:
    """The dialects' paths (the streams and the JSON routes beside them): each as its
    dialect writes it."""
    paths = {}
    for dialect in STREAMS:
        paths[dialect.path] = {"post": dialect.operation()}
        for route in dialect.beside:
            paths[route.path] = {"post": route.operation()}
    return paths


TURN_BLOCKS = {
    "user": ("TextBlock", "ImageBlock", "DocumentBlock", "ToolResultBlock"),
    "assistant": ("TextBlock", "ToolUseBlock", "ThinkingBlock", "RedactedThinkingBlock"),
    "system": ("TextBlock",),
}
"""The blocks ``app.apis.messages.request`` reads in a turn of each role (any other is a 400)."""


def _turn(role: str, blocks: list[str], max_chars: int) -> dict[str, Any]:
    text = {"type": "string", "minLength": int(role == "user"), "maxLength": max_chars}
    items = {"anyOf": [ref(block) for block in blocks]}
    content = {"anyOf": [text, {"type": "array", "minItems": 1, "items": items}]}
    return {"properties": {"role": {"const": role}, "content": content}}


OUTPUT_LIMIT_DOC = f"Above the alias's output limit, lowered to it (`{CLAMPED_HEADER}` says so)."


def _constrain(
    schemas: dict[str, Any], models: list[str], max_messages: int, max_message_chars: int
) -> None:
    """Limits the handlers check after decoding, so the schema states them too."""
    for body in ("ChatRequest", "ResponsesRequest", "MessagesRequest", "CountTokensRequest"):
        model = {"type": "string", "enum": models, "description": "A model alias."}
        schemas[body]["properties"]["model"] = model
        if body != "ResponsesRequest":  # its input is not a list of messages
            schemas[body]["properties"]["messages"].update(minItems=1, maxItems=max_messages)
    chat = schemas["ChatRequest"]["properties"]
    for field in ("max_tokens", "max_completion_tokens"):
        chat[field]["description"] = OUTPUT_LIMIT_DOC
    schemas["ResponsesRequest"]["properties"]["max_output_tokens"]["description"] = OUTPUT_LIMIT_DOC
    message = schemas["Message"]
    message["properties"]["content"]["anyOf"][0]["maxLength"] = max_message_chars
    message["properties"]["content"]["description"] = (
        "Text or content parts (null: assistant only)."
    )
    message["if"] = {"properties": {"role": {"const": "assistant"}}}
    not_null = {"content": {"not": {"type": "null"}}}
    message["else"] = {"required": ["content"], "properties": not_null}
    request = schemas["MessagesRequest"]["properties"]
    request["max_tokens"]["description"] = OUTPUT_LIMIT_DOC
    request["stop_sequences"]["anyOf"][0]["maxItems"] = MAX_STOP_SEQUENCES
    # read only to be refused: what the document allows of them is what svc serves
    for body in ("MessagesRequest", "CountTokensRequest"):
        properties = schemas[body]["properties"]
        properties["mcp_servers"] = {
            "anyOf": [{"type": "array", "maxItems": 0}, {"type": "null"}],
            "description": "svc connects to no MCP servers: any is a 400.",
        }
        properties["container"] = {
            "type": "null",
            "description": "svc runs no containers: any is a 400.",
        }
    # the blocks a turn of each role may hold; a user turn's text must not be empty
    turn = schemas["MessageParam"]
    del turn["properties"]
    turn["oneOf"] = [
        _turn(role, list(blocks), max_message_chars) for role, blocks in TURN_BLOCKS.items()
    ]
    # str.isprintable, which no annotation states, as a pattern (the lengths are in the types)
    for body in ("KeyCreateRequest", "KeyUpdateRequest"):
        name = schemas[body]["properties"]["name"]
        name.update(pattern=PRINTABLE, description="Printable characters.")
    view_id = schemas["SpotlightRequest"]["properties"]["view_id"]
    view_id.update(pattern=PRINTABLE, description="Printable characters.")


def _headers(status: int, documented: dict[str, Any]) -> dict[str, Any]:
    """Every response's headers: the security headers (fixed values), plus what an error of
    that status may carry."""
    headers = dict(documented)
    for name, value in SECURITY_HEADERS:
        headers[name] = {"required": True, "schema": {"type": "string", "const": value}}
    for kind in ErrorKind:
        if kind.status == status:
            for header in kind.headers:
                documented_header = {"required": False, "description": header.description}
                headers.setdefault(header.name, documented_header)["schema"] = {"type": "string"}
    return headers
