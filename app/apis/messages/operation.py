"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` in the OpenAPI document,
written here (granian serves the first, so Litestar cannot document it; Litestar's
response specs cannot state the second's errors): Anthropic's headers, credentials and
error shape."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, get_args

from app.apis.messages.errors import error_type
from app.apis.messages.wire import StreamEvent
from app.apis.operation import (
    API_KEY,
    BODY_ERRORS,
    KEY_ERRORS,
    json_content,
    json_string,
    operation,
    parameter,
    ref,
    stream_operation,
)
from app.core.errors import ErrorKind

# The key as Anthropic's clients send it, or as a bearer.
_SECURITY: list[dict[str, list[str]]] = [*API_KEY, {"xApiKey": []}]
_PARAMETERS = [
    parameter(name, where, f"{text}: accepted, ignored.", {"type": kind})
    for name, where, kind, text in (
        (
            "anthropic-version",
            "header",
            "string",
            "Anthropic's API version (the SDKs send `2023-06-01`)",
        ),
        ("anthropic-beta", "header", "string", "Anthropic's beta features, comma-separated"),
        ("beta", "query", "boolean", "What the SDKs' beta clients add (`beta=true`)"),
    )
]
# The key, the body, its model and the key's rate limit; nothing is reserved.
COUNT_TOKENS_ERRORS = (
    *KEY_ERRORS,
    *BODY_ERRORS,
    ErrorKind.MODEL_NOT_FOUND,
    ErrorKind.MODEL_NOT_ALLOWED,
    ErrorKind.KEY_RATE_LIMITED,
)


_REQUEST_ID = {
    "required": True,
    "description": "The request's id (as `x-request-id`), where Anthropic's SDKs read it.",
    "schema": {"type": "string"},
}


def _error_response(kinds: Sequence[ErrorKind]) -> dict[str, Any]:
    """Anthropic's error body, its ``error.type`` the one of that status, and the
    ``request-id`` header."""
    kind_type = error_type(kinds[0].status)
    typed = {"properties": {"error": {"properties": {"type": {"const": kind_type}}}}}
    codes = ", ".join(f"`{kind.code}`" for kind in kinds)
    return {
        "description": f"Anthropic-shaped error of type `{kind_type}`; svc's reasons: {codes}.",
        "headers": {"request-id": _REQUEST_ID},
        "content": json_content({"allOf": [ref("AnthropicErrorBody"), typed]}),
    }


def _events() -> dict[str, Any]:
    """One event of the stream: the ``event`` line names the type of its ``data``."""
    return {
        "oneOf": [
            {
                "type": "object",
                "required": ["event", "data"],
                "properties": {
                    "event": {"const": struct.__struct_config__.tag},
                    "data": json_string(ref(struct.__name__)),
                },
            }
            for struct in get_args(StreamEvent)
        ]
    }


def messages_operation() -> dict[str, Any]:
    return stream_operation(
        summary="Create a message (Anthropic's Messages API, streamed)",
        description=(
            "Anthropic's Messages API on the chat completion path: the same keys, aliases, "
            "prices, caps, ceilings, reservation and settlement. The key goes in `x-api-key` "
            "or `Authorization: Bearer`. Always streams; `stream` is accepted and ignored. "
            "Unknown fields are ignored; what svc cannot serve (server tools, "
            "`mcp_servers`, `container`, files by id) is a 400 naming the field. Errors "
            "before the first byte are JSON in Anthropic's shape."
        ),
        operation_id="CreateMessage",
        body="MessagesRequest",
        stream=(
            "A Server-Sent Events stream of Anthropic's events (docs/api.md, Anthropic "
            "Messages), each an `event:` line naming its type and a JSON `data` of that "
            "type: `message_start`, `ping`, then each content block as "
            "`content_block_start`, `content_block_delta` × N, `content_block_stop`; then "
            "`message_delta` (stop reason and the usage billed) and `message_stop` (the "
            "`svc` object). A failure after the stream began ends it with an `error` event "
            "instead (with `svc` when it was settled)."
        ),
        event=_events(),
        error_response=_error_response,
        security=_SECURITY,
        parameters=_PARAMETERS,
    )


def count_tokens_operation() -> dict[str, Any]:
    """It takes the key and answers errors as ``POST /v1/messages`` does."""
    ok = {
        "description": (
            "The prompt tokens svc reserves for this body as a Messages request (its "
            "prompt bound): never fewer than a provider would count."
        ),
        "headers": {"request-id": _REQUEST_ID},
        "content": json_content(ref("CountTokensResponse")),
    }
    return operation(
        summary="Count a Messages request's input tokens",
        description=(
            "Anthropic's token count: a Messages request's body (`max_tokens` and the other "
            "output settings may be left out, and are ignored) answered with "
            "`input_tokens`. Reserves and charges nothing; the key must be usable and "
            "allowed the model. Errors are JSON in Anthropic's shape."
        ),
        operation_id="CountMessageTokens",
        body="CountTokensRequest",
        responses={"200": ok},
        errors=COUNT_TOKENS_ERRORS,
        error_response=_error_response,
        security=_SECURITY,
        parameters=_PARAMETERS,
    )
