"""The routes Litestar cannot see in the OpenAPI document (they are served over RSGI,
``app.http.rsgi``): the three streaming routes (chat completions, the Responses API and
Anthropic's Messages API) and the Messages API's token count; their request bodies, the
events of their streams, and the errors they answer before the first byte."""

from __future__ import annotations

from typing import Any, get_args

from app.apis.messages.wire import StreamEvent
from app.apis.responses.tools import OMITTED_TOOLS_HEADER
from app.completion.request import CLAMPED_HEADER
from app.http.openapi import (
    ANTHROPIC_PARAMS,
    API_KEY,
    API_KEY_OR_X_API_KEY,
    CHAT_ERRORS,
    COMPONENT,
    COUNT_TOKENS_ERRORS,
    IDEMPOTENCY_KEY,
    MAX_CREDITS,
    anthropic_error_response,
    by_status,
    error_response,
    request_id_header,
)

_DONE = {"const": "[DONE]", "description": "The last event."}
_JSON_EVENT = {
    "type": "string",
    "contentMediaType": "application/json",
    "contentSchema": {
        "anyOf": [
            {"$ref": COMPONENT.format(name="ChatCompletionChunk")},
            {"$ref": COMPONENT.format(name="ErrorBody")},
        ]
    },
}
_STREAM_DOC = (
    "A Server-Sent Events stream. The schema describes one event: its `data` is a JSON "
    "`chat.completion.chunk` (content chunks; the last has `finish_reason` `stop`; then one "
    "chunk with empty `choices` and the `svc` object), an OpenAI error object when the "
    "upstream fails mid-stream, or the terminator `[DONE]`."
)


def chat_operation() -> dict[str, Any]:
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
        event=_data_event({"anyOf": [_DONE, _JSON_EVENT]}),
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


def responses_operation() -> dict[str, Any]:
    """``POST /v1/responses``, served outside Litestar as chat completions are."""
    return _stream_operation(
        summary="Create a response (the Responses API, streamed)",
        description=(
            "The Responses API on the chat completion path: the same keys, prices, caps, "
            "reservation and settlement. Always streams; `stream` is accepted and ignored; "
            "every response is `store: false`. Fields that need stored state and "
            "`background: true` are a 400 naming them. A `namespace` tool's functions are "
            "served and their calls carry the client's `name` and `namespace`; hosted tools "
            "(`web_search`, ...) are left out, the 200's `svc-omitted-tools` header naming "
            "them. Unknown fields are ignored. Errors before the first byte are JSON."
        ),
        operation_id="CreateResponse",
        body="ResponsesRequest",
        stream=_RESPONSES_STREAM_DOC,
        event=_data_event(_RESPONSES_EVENT),
        headers={
            OMITTED_TOOLS_HEADER: {
                "description": (
                    "The hosted tool types (comma-separated) left out of what a chat provider "
                    "was offered; absent when none were."
                ),
                "schema": {"type": "string"},
            }
        },
    )


_MESSAGES_STREAM_DOC = (
    "A Server-Sent Events stream of Anthropic's events (docs/api.md, Anthropic Messages), "
    "each an `event:` line naming its type and a JSON `data` of that type: "
    "`message_start`, `ping`, then each content block as `content_block_start`, "
    "`content_block_delta` × N, `content_block_stop`; then `message_delta` (stop reason and "
    "the usage billed) and `message_stop` (the `svc` object). A failure after the stream "
    "began ends it with an `error` event instead (with `svc` when it was settled)."
)


def _messages_events() -> dict[str, Any]:
    """One event of the Messages stream: the ``event`` line names the type of its ``data``."""
    events = []
    for struct in get_args(StreamEvent):
        tag = struct.__struct_config__.tag
        data = {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": COMPONENT.format(name=struct.__name__)},
        }
        events.append(
            {
                "type": "object",
                "required": ["event", "data"],
                "properties": {"event": {"const": tag}, "data": data},
            }
        )
    return {"oneOf": events}


def messages_operation() -> dict[str, Any]:
    """``POST /v1/messages``, Anthropic's Messages API, served outside Litestar as chat
    completions are."""
    operation = _stream_operation(
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
        stream=_MESSAGES_STREAM_DOC,
        event=_messages_events(),
        error_body="AnthropicErrorBody",
    )
    operation["security"] = API_KEY_OR_X_API_KEY
    operation["parameters"].extend(param.to_schema() for param in ANTHROPIC_PARAMS)
    return operation


def count_tokens_operation() -> dict[str, Any]:
    """``POST /v1/messages/count_tokens``, served beside the streams (it takes the key and
    answers errors as ``POST /v1/messages`` does)."""
    answer = {"$ref": COMPONENT.format(name="CountTokensResponse")}
    responses: dict[str, Any] = {
        "200": {
            "description": (
                "The prompt tokens svc reserves for this body as a Messages request (its "
                "prompt bound): never fewer than a provider would count."
            ),
            "headers": request_id_header(),
            "content": {"application/json": {"schema": answer}},
        }
    }
    for status, group in by_status(COUNT_TOKENS_ERRORS).items():
        responses[str(status)] = anthropic_error_response(group, "AnthropicErrorBody")
    return {
        "summary": "Count a Messages request's input tokens",
        "description": (
            "Anthropic's token count: a Messages request's body (`max_tokens` and the other "
            "output settings may be left out, and are ignored) answered with "
            "`input_tokens`. Reserves and charges nothing; the key must be usable and "
            "allowed the model. Errors are JSON in Anthropic's shape."
        ),
        "operationId": "CountMessageTokens",
        "security": API_KEY_OR_X_API_KEY,
        "parameters": [param.to_schema() for param in ANTHROPIC_PARAMS],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"$ref": COMPONENT.format(name="CountTokensRequest")}
                }
            },
        },
        "responses": responses,
    }


_CLAMPED = {
    "required": False,
    "description": (
        "The output limit the request was served with, when the one it asked for was above "
        "the alias's (`max_tokens`, `max_completion_tokens` or `max_output_tokens`) and was "
        "lowered to it. Absent otherwise."
    ),
    "schema": {"type": "string", "pattern": "^[1-9][0-9]*$"},
}


def _stream_operation(
    *,
    summary: str,
    description: str,
    operation_id: str,
    body: str,
    stream: str,
    event: dict[str, Any],
    error_body: str | None = None,
    headers: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A streamed operation: its request body, its event stream (``event``: the schema of
    one event) and the errors it may answer before the first byte (``CHAT_ERRORS``), in
    OpenAI's shape, or in Anthropic's with ``error_body`` (its component); ``headers``: the
    200's own, beside those of every stream (``CLAMPED_HEADER``)."""
    responses: dict[str, Any] = {
        "200": {
            "description": stream,
            "headers": {CLAMPED_HEADER: dict(_CLAMPED), **(headers or {})},
            "content": {"text/event-stream": {"schema": event}},
        }
    }
    for status, group in by_status(CHAT_ERRORS).items():
        responses[str(status)] = (
            error_response(group)
            if error_body is None
            else anthropic_error_response(group, error_body)
        )
    return {
        "summary": summary,
        "description": description,
        "operationId": operation_id,
        "security": API_KEY,
        "parameters": [IDEMPOTENCY_KEY.to_schema(), MAX_CREDITS.to_schema()],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": COMPONENT.format(name=body)}}},
        },
        "responses": responses,
    }


def _data_event(data: dict[str, Any]) -> dict[str, Any]:
    """One event whose ``data`` is described (and whose ``event`` line is not)."""
    return {"type": "object", "required": ["data"], "properties": {"data": data}}
