"""``POST /v1/responses`` in the OpenAPI document (granian serves it, as chat completions)."""

from __future__ import annotations

from typing import Any

from app.apis.operation import data_event, json_string, stream_operation
from app.apis.responses.tools import OMITTED_TOOLS_HEADER

_EVENT = json_string(
    {
        "type": "object",
        "required": ["type", "sequence_number"],
        "properties": {
            "type": {"type": "string", "pattern": "^response\\."},
            "sequence_number": {"type": "integer", "minimum": 0},
        },
    }
)


def responses_operation() -> dict[str, Any]:
    return stream_operation(
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
        stream=(
            "A Server-Sent Events stream of Responses API events (docs/api.md, Responses): "
            "each `data` a JSON event with its `type` and a `sequence_number` counting from "
            "0, from `response.created` to `response.completed`, `response.incomplete` or "
            "`response.failed` (whose `response` carries the usage and the `svc` object)."
        ),
        event=data_event(_EVENT),
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
