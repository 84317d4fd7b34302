"""The OpenAPI document as served: Litestar's generated one, completed once per worker with
what it cannot see (the streaming routes, served over RSGI: ``app.http.openapi_streams``;
the msgspec schemas of the request bodies and stream chunks; the limits the handlers check
after decoding; the headers every response carries)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import msgspec
from litestar import Request
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme

from app import __version__
from app.chat.chunks import ChatCompletionChunk
from app.core.errors import ErrorBody, ErrorKind
from app.http.headers import SECURITY_HEADERS
from app.http.openapi import BODY_TYPES, COMPONENT, ERROR_HEADERS, PRINTABLE, error_response
from app.http.openapi_streams import chat_operation, responses_operation
from app.responses.wire import ResponsesRequest
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
        *BODY_TYPES.values(),
    ]
    _, components = msgspec.json.schema_components(types, ref_template=COMPONENT)
    for name, schema in components.items():
        schemas.setdefault(name, schema)
    _constrain(schemas, models, max_messages, max_message_chars)
    for body in ("KeyCreateRequest", "KeyUpdateRequest"):
        allowed = schemas[body]["properties"]["allowed_models"]["anyOf"][0]
        allowed["items"]["enum"] = key_models
    document["paths"]["/v1/chat/completions"] = {"post": chat_operation()}
    document["paths"]["/v1/responses"] = {"post": responses_operation()}
    # the handler answers JSON or, with format=csv, a CSV stream (its annotation says neither)
    for path, body in (
        ("/v1/usage", "UsageSummary"),
        ("/v1/activity", "ActivityPage"),
        ("/admin/v1/accounts/{pid}/activity", "ActivityPage"),
    ):
        document["paths"][path]["get"]["responses"]["200"]["content"] = {
            "application/json": {"schema": {"$ref": COMPONENT.format(name=body)}},
            CSV_MEDIA_TYPE: {"schema": {"type": "string"}},
        }
    for path_item in document["paths"].values():
        for operation in path_item.values():
            for status, response in operation.get("responses", {}).items():
                # Litestar documents its own validation error body; the exception handler
                # answers those in the OpenAI shape, so the document says that instead.
                if int(status) == 400 and "$ref" not in _json_schema(response):
                    response.update(error_response([ErrorKind.INVALID_VALUE]))
                response["headers"] = _headers(int(status), response.get("headers", {}))
    return document


def _json_schema(response: Mapping[str, Any]) -> Mapping[str, Any]:
    schema: Mapping[str, Any] = response.get("content", {}).get("application/json", {})
    return schema.get("schema", {})  # type: ignore[no-any-return]


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
        name.update(pattern=PRINTABLE, description="Printable characters.")
    view_id = schemas["SpotlightRequest"]["properties"]["view_id"]
    view_id.update(pattern=PRINTABLE, description="Printable characters.")


def _headers(status: int, documented: dict[str, Any]) -> dict[str, Any]:
    """Every response's headers: the security headers (fixed values), plus what an error of
    that status may carry."""
    headers = dict(documented)
    for name, value in SECURITY_HEADERS:
        headers[name] = {"required": True, "schema": {"type": "string", "const": value}}
    for kind, extra in ERROR_HEADERS.items():
        if kind.status == status:
            for name, text in extra.items():
                headers.setdefault(name, {"required": False, "description": text})
                headers[name]["schema"] = {"type": "string"}
    return headers
