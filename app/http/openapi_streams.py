"""The two streaming routes in the OpenAPI document (Litestar cannot see them: they are
served over RSGI, ``app.http.rsgi``): their request bodies, the events of their streams,
and the errors they answer before the first byte."""

from __future__ import annotations

from typing import Any

from app.http.openapi import (
    API_KEY,
    CHAT_ERRORS,
    COMPONENT,
    IDEMPOTENCY_KEY,
    by_status,
    error_response,
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


def responses_operation() -> dict[str, Any]:
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
    for status, group in by_status(CHAT_ERRORS).items():
        responses[str(status)] = error_response(group)
    return {
        "summary": summary,
        "description": description,
        "operationId": operation_id,
        "security": API_KEY,
        "parameters": [IDEMPOTENCY_KEY.to_schema()],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": COMPONENT.format(name=body)}}},
        },
        "responses": responses,
    }
