"""``POST /v1/chat/completions`` in the OpenAPI document (granian serves it, so Litestar
cannot document it)."""

from __future__ import annotations

from typing import Any

from app.apis.operation import data_event, json_string, ref, stream_operation

_DONE = {"const": "[DONE]", "description": "The last event."}
_JSON_EVENT = json_string({"anyOf": [ref("ChatCompletionChunk"), ref("ErrorBody")]})


def chat_operation() -> dict[str, Any]:
    return stream_operation(
        summary="Create a chat completion (streamed)",
        description=(
            "Reserves credits, streams the completion as Server-Sent Events, then settles to "
            "actual use. Always streams; `stream` is accepted and ignored. Unknown fields are "
            "ignored. Errors before the first byte are JSON."
        ),
        operation_id="CreateChatCompletion",
        body="ChatRequest",
        stream=(
            "A Server-Sent Events stream. The schema describes one event: its `data` is a "
            "JSON `chat.completion.chunk` (content chunks; the last has `finish_reason` "
            "`stop`; then one chunk with empty `choices` and the `svc` object), an OpenAI "
            "error object when the upstream fails mid-stream, or the terminator `[DONE]`."
        ),
        event=data_event({"anyOf": [_DONE, _JSON_EVENT]}),
    )
