"""Server-Sent Events encoding of svc's completion chunks.

Per-chunk work is one msgspec encode of the text between two precomputed byte strings:
this runs once per token on the hot path.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

from app.completion.output import SHUT_DOWN, UNSETTLED, UPSTREAM_FAILED, StreamEnd, SvcMetadata
from app.upstream.base import Usage
from app.upstream.wire import Delta, ToolCallDelta

DONE = b"data: [DONE]\n\n"
_encode = msgspec.json.encode


FinishReason = Literal["stop", "tool_calls"]


class ChunkDelta(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    role: Literal["assistant"] | UnsetType = UNSET
    content: str | UnsetType = UNSET
    tool_calls: list[ToolCallDelta] | UnsetType = UNSET
    refusal: str | UnsetType = UNSET
    reasoning_content: str | UnsetType = UNSET
    reasoning: str | UnsetType = UNSET


class ChunkChoice(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    index: int
    delta: ChunkDelta
    finish_reason: FinishReason | None
    logprobs: msgspec.Raw | UnsetType = UNSET


class ChunkUsage(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """OpenAI's usage object: on the metadata chunk, whether or not the client asked for it
    (``stream_options.include_usage``), as OpenRouter's streams carry it."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int] | UnsetType = UNSET
    completion_tokens_details: dict[str, int] | UnsetType = UNSET


class ChatCompletionChunk(msgspec.Struct, forbid_unknown_fields=True):
    """What ``ChunkEncoder`` writes, as a type: the OpenAPI document's stream schema, and
    the unit tests decode real chunks with it."""

    id: Annotated[str, msgspec.Meta(pattern=r"^chatcmpl-svc-[0-9]+$")]
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: ChunkUsage | UnsetType = UNSET
    svc: SvcMetadata | UnsetType = UNSET


_FIRST = b'[{"index":0,"delta":{"role":"assistant","content":'
_TAIL = b'},"finish_reason":null}]}\n\n'
_STOP = b'},"finish_reason":"stop"}]}\n\n'
_META_USAGE = b'[],"usage":'


class ChunkEncoder:
    """Encodes the chunks of one response: same id, created and model in every chunk.

    It keeps the envelope, and the head of the content chunks after the first: the first
    chunk's head and the metadata chunk's are joined when written, once each, not held
    through the stream (two objects fewer per open stream, about 400 bytes; bench/CHANGELOG.md,
    issue 53)."""

    __slots__ = ("_envelope", "_head", "completion_id")

    def __init__(self, completion_id: int, created: int, model: str) -> None:
        self.completion_id = completion_id
        envelope = (
            b'data: {"id":"chatcmpl-svc-%d","object":"chat.completion.chunk","created":%d,'
            b'"model":%s,"choices":' % (completion_id, created, _encode(model))
        )
        self._envelope = envelope
        self._head = envelope + b'[{"index":0,"delta":{"content":'

    def content(self, text: str, *, first: bool, last: bool) -> bytes:
        """A content chunk; the first carries the role, the last carries finish_reason stop."""
        head = self._envelope + _FIRST if first else self._head
        return head + _encode(text) + (_STOP if last else _TAIL)

    def delta(self, delta: Delta, *, first: bool, finish: FinishReason | None) -> bytes:
        """A chunk for a delta that carries more than text: tool-call pieces, a refusal,
        reasoning, log probabilities (re-encoded: nothing of the upstream's chunk but these)."""
        out = ChunkDelta(
            role="assistant" if first else UNSET,
            content=delta.content,
            tool_calls=delta.tool_calls,
            refusal=delta.refusal,
            reasoning_content=delta.reasoning_content,
            reasoning=delta.reasoning,
        )
        choice = ChunkChoice(index=0, delta=out, finish_reason=finish, logprobs=delta.logprobs)
        return self._envelope + _encode([choice]) + b"}\n\n"

    def finish(self, reason: FinishReason, *, first: bool) -> bytes:
        """An empty chunk that only ends the choice (after tool calls, as OpenAI's do)."""
        out = ChunkDelta(role="assistant" if first else UNSET)
        choice = ChunkChoice(index=0, delta=out, finish_reason=reason)
        return self._envelope + _encode([choice]) + b"}\n\n"

    def metadata(
        self,
        requested_model: str,
        credits_used: int,
        balance_remaining: int,
        usage: ChunkUsage,
    ) -> bytes:
        """The final chunk: empty choices, OpenAI's usage object and the svc object of
        exactly three fields. Usage goes here alone, on the chunk OpenAI's include_usage puts
        it on: clients that read ``chunk.usage`` on the last chunk (AutoGen, Haystack,
        Mastra) find it, and those that add it up across chunks (the openai SDK's stream
        state, LangChain) count it once."""
        meta = SvcMetadata(requested_model, credits_used, balance_remaining)
        return self._envelope + _META_USAGE + _encode(usage) + b',"svc":' + _encode(meta) + b"}\n\n"


def chunk_usage(prompt_tokens: int, completion_tokens: int, reported: Usage | None) -> ChunkUsage:
    """The usage object of what was billed, with the details the upstream gave."""
    return ChunkUsage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        prompt_tokens_details=(reported and reported.prompt_tokens_details) or UNSET,
        completion_tokens_details=(reported and reported.completion_tokens_details) or UNSET,
    )


def error_event(message: str, err_type: str, code: str) -> bytes:
    """An OpenAI-style error event sent inside a stream that already started."""
    body = {"error": {"message": message, "type": err_type, "param": None, "code": code}}
    return b"data: " + _encode(body) + b"\n\n"


class ChatStream:
    """A Chat Completions stream (``StreamOutput``): svc's chunks, then its metadata chunk
    and ``[DONE]``. The first chunk carries the role; finish_reason goes on the last output
    chunk when the upstream's finish came in the same read, else on an empty closing chunk."""

    __slots__ = ("_encoder", "_first", "_requested")

    def __init__(self, encoder: ChunkEncoder, *, requested: str) -> None:
        self._encoder = encoder
        self._requested = requested
        self._first = True

    @property
    def id(self) -> str:
        return f"chatcmpl-svc-{self._encoder.completion_id}"

    def opening(self, started: Usage | None = None) -> bytes:
        return b""

    def piece(self, piece: str | Delta) -> bytes:
        """A choice chunk without finish_reason."""
        first, self._first = self._first, False
        if type(piece) is str:
            return self._encoder.content(piece, first=first, last=False)
        assert isinstance(piece, Delta)
        return self._encoder.delta(piece, first=first, finish=None)

    def closing(self, pending: str | Delta | None, *, tool_calls: bool) -> bytes:
        """The last choice chunk, with finish_reason: "tool_calls" after tool calls (an empty
        delta, as OpenAI's), else "stop" (on the last text, or an empty-content chunk)."""
        first, self._first = self._first, False
        encoder = self._encoder
        if tool_calls:
            if pending is None:
                return encoder.finish("tool_calls", first=first)
            if isinstance(pending, Delta):
                return encoder.delta(pending, first=first, finish="tool_calls")
            return encoder.content(pending, first=first, last=False) + encoder.finish(
                "tool_calls", first=False
            )
        if isinstance(pending, Delta):
            return encoder.delta(pending, first=first, finish="stop")
        return encoder.content(pending or "", first=first, last=True)

    def ending(self, end: StreamEnd) -> bytes:
        """An error event when the stream failed or was cut, then the metadata chunk (with
        OpenAI's usage object, asked for or not) and ``[DONE]``."""
        head = b""
        if end.outcome == "upstream_error":
            head = error_event(UPSTREAM_FAILED, "upstream_error", "upstream_unavailable")
        elif end.outcome == "shutdown":
            head = error_event(SHUT_DOWN, "server_error", "service_unavailable")
        usage = chunk_usage(end.prompt_tokens, end.completion_tokens, end.reported)
        meta = self._encoder.metadata(self._requested, end.credits_used, end.balance, usage)
        return head + meta + DONE

    def unsettled(self) -> bytes:
        return error_event(UNSETTLED, "server_error", "service_unavailable") + DONE
