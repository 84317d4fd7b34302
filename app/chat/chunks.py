"""Server-Sent Events encoding of svc's completion chunks.

Per-chunk work is one msgspec encode of the text between two precomputed byte strings:
this runs once per token on the hot path.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

DONE = b"data: [DONE]\n\n"
_encode = msgspec.json.encode


class SvcMetadata(msgspec.Struct, forbid_unknown_fields=True):
    requested_model: str
    credits_used: int
    balance_remaining: int


class ChunkDelta(msgspec.Struct, forbid_unknown_fields=True):
    content: str
    role: Literal["assistant"] | msgspec.UnsetType = msgspec.UNSET


class ChunkChoice(msgspec.Struct, forbid_unknown_fields=True):
    index: int
    delta: ChunkDelta
    finish_reason: Literal["stop"] | None


class ChatCompletionChunk(msgspec.Struct, forbid_unknown_fields=True):
    """What ``ChunkEncoder`` writes, as a type: the OpenAPI document's stream schema, and
    the unit tests decode real chunks with it."""

    id: Annotated[str, msgspec.Meta(pattern=r"^chatcmpl-svc-[0-9]+$")]
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    svc: SvcMetadata | msgspec.UnsetType = msgspec.UNSET


class ChunkEncoder:
    """Encodes the chunks of one response: same id, created and model in every chunk."""

    __slots__ = ("_first", "_head", "_meta_head", "_stop", "_tail")

    def __init__(self, completion_id: int, created: int, model: str) -> None:
        envelope = (
            b'data: {"id":"chatcmpl-svc-%d","object":"chat.completion.chunk","created":%d,'
            b'"model":%s,"choices":' % (completion_id, created, _encode(model))
        )
        self._head = envelope + b'[{"index":0,"delta":{"content":'
        self._first = envelope + b'[{"index":0,"delta":{"role":"assistant","content":'
        self._tail = b'},"finish_reason":null}]}\n\n'
        self._stop = b'},"finish_reason":"stop"}]}\n\n'
        self._meta_head = envelope + b'[],"svc":'

    def content(self, text: str, *, first: bool, last: bool) -> bytes:
        """A content chunk; the first carries the role, the last carries finish_reason stop."""
        head = self._first if first else self._head
        return head + _encode(text) + (self._stop if last else self._tail)

    def metadata(self, requested_model: str, credits_used: int, balance_remaining: int) -> bytes:
        """The final chunk: empty choices and the svc object of exactly three fields."""
        meta = SvcMetadata(requested_model, credits_used, balance_remaining)
        return self._meta_head + _encode(meta) + b"}\n\n"


def error_event(message: str, err_type: str, code: str) -> bytes:
    """An OpenAI-style error event sent inside a stream that already started."""
    body = {"error": {"message": message, "type": err_type, "param": None, "code": code}}
    return b"data: " + _encode(body) + b"\n\n"
