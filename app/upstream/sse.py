"""Parsing the OpenAI chat completion stream an upstream sends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import UNSET

from app.core.errors import UpstreamError
from app.upstream.base import CHOICE_END, ChoiceEnd, Piece, Usage
from app.upstream.counts import usage_report
from app.upstream.wire import Delta, ToolCallDelta


class _ToolCallDelta(ToolCallDelta):
    """As upstreams send it: some leave out the index of a call (there is one call, 0)."""

    index: int = 0


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None
    refusal: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


_NULL = msgspec.Raw(b"null")


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None
    logprobs: msgspec.Raw = msgspec.field(default_factory=lambda: _NULL)  # kept as sent


class _Usage(msgspec.Struct):
    """As sent: any JSON, each count checked as one (``app.upstream.counts``)."""

    prompt_tokens: object = None
    completion_tokens: object = None
    prompt_tokens_details: object = None
    completion_tokens_details: object = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []
    usage: _Usage | None = None
    error: object | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


class _MatchedStop(msgspec.Struct):
    """What a finish chunk's choice may say of the stop the upstream matched: vLLM's
    ``stop_reason`` (the stop string, or a stop token's id), SGLang's ``matched_stop``. Any
    type a server puts there decodes; only a string is read."""

    stop_reason: Any = None
    matched_stop: Any = None


class _FinishChunk(msgspec.Struct):
    choices: list[_MatchedStop] = []


# read of the finish chunk alone, once per stream (``_choice_end``): the chunks before it
# are decoded without these fields, which vLLM and SGLang send, null, on every one
_decode_finish = msgspec.json.Decoder(_FinishChunk).decode
DONE = object()


def _usage(usage: _Usage) -> Usage | None:
    return usage_report(
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.prompt_tokens_details,
        usage.completion_tokens_details,
    )


def _choice_piece(choice: _Choice) -> Piece | None:
    """Plain text as ``str`` (the common case); anything more as a ``Delta``. The text of a
    chunk that also says "stop" is plain text: the end of the stream says stop anyway."""
    delta = choice.delta
    plain = (
        delta is not None
        and delta.tool_calls is None
        and delta.refusal is None
        and delta.reasoning_content is None
        and delta.reasoning is None
        and choice.logprobs == _NULL
        and choice.finish_reason in (None, "stop")
    )
    if plain:
        return delta.content or None  # type: ignore[union-attr]
    if delta is None:
        delta = _Delta()
    piece = Delta(
        content=delta.content if delta.content else UNSET,
        tool_calls=[_relayed(call) for call in delta.tool_calls] if delta.tool_calls else UNSET,
        refusal=delta.refusal if delta.refusal else UNSET,
        reasoning_content=delta.reasoning_content if delta.reasoning_content else UNSET,
        reasoning=delta.reasoning if delta.reasoning else UNSET,
        logprobs=UNSET if choice.logprobs == _NULL else choice.logprobs,
        finish_reason=choice.finish_reason if choice.finish_reason else UNSET,
    )
    return piece if piece.carries_output() or piece.finish_reason is not UNSET else None


def _choice_end(choice: _Choice, payload: bytes) -> ChoiceEnd:
    """The end of the choice (once per stream; ``payload`` is its chunk): with the stop
    sequence the upstream says it stopped at, when it names one as a string; ``CHOICE_END``
    otherwise (OpenAI's own streams say "stop" only). Whether it is one the request sent is
    the relay's to check."""
    if choice.finish_reason != "stop":
        return CHOICE_END
    if b'"stop_reason"' not in payload and b'"matched_stop"' not in payload:
        return CHOICE_END
    for said in _decode_finish(payload).choices[:1]:
        for matched in (said.stop_reason, said.matched_stop):
            if isinstance(matched, str) and matched:
                return ChoiceEnd(matched)
    return CHOICE_END


def _relayed(call: _ToolCallDelta) -> ToolCallDelta:
    return ToolCallDelta(index=call.index, id=call.id, type=call.type, function=call.function)


def parse_data_line(line: bytes) -> list[Piece] | object | None:
    """One line of an upstream SSE stream: its pieces (a text, a ``Delta``, a ``ChoiceEnd``
    after a finish_reason, a ``Usage``), ``DONE``, or None for lines that carry nothing for
    svc (comments, blank lines, role-only deltas)."""
    if not line.startswith(b"data:"):
        return None
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return DONE
    try:
        chunk = _decode_chunk(payload)
    except msgspec.DecodeError as exc:
        raise UpstreamError("malformed chunk from upstream") from exc
    if chunk.error is not None:
        raise UpstreamError("upstream reported an error mid-stream")
    pieces: list[Piece] = []
    for choice in chunk.choices[:1]:  # svc asks for one choice (n = 1)
        piece = _choice_piece(choice)
        if piece is not None:
            pieces.append(piece)
        if choice.finish_reason is not None:
            pieces.append(_choice_end(choice, payload))
    if chunk.usage is not None:
        usage = _usage(chunk.usage)
        if usage is not None:
            pieces.append(usage)
    return pieces or None


class FinalPieces(list[Piece]):
    """The pieces of a stream's last event, for a stream that ends without ``[DONE]`` (the
    Responses API's ends with its ``response.completed`` event)."""


LineParser = Callable[[bytes], "list[Piece] | object | None"]
"""One SSE line to its pieces (``FinalPieces`` at the stream's last), ``DONE``, or None."""


class LineSplitter:
    """Turns the bytes of an upstream SSE stream, read in any sizes, into the pieces they
    complete. ``done`` is set once ``data: [DONE]`` (or the ``FinalPieces``) arrived.
    ``parse`` reads one line: a chat completion stream's by default."""

    __slots__ = ("_parse", "_rest", "done")

    def __init__(self, parse: LineParser = parse_data_line) -> None:
        self._parse = parse
        self._rest = b""
        self.done = False

    def feed(self, data: bytes) -> list[Piece]:
        """The pieces completed by ``data`` (maybe none); nothing after ``[DONE]``."""
        if self.done:
            return []
        if self._rest:
            data = self._rest + data
        lines = data.split(b"\n")
        self._rest = lines.pop()
        pieces: list[Piece] = []
        parse = self._parse
        for line in lines:
            item = parse(line)
            if item is None:
                continue
            if item.__class__ is list:
                pieces.extend(item)  # type: ignore[arg-type]
                continue
            self.done = True
            if item is not DONE:
                pieces.extend(item)  # type: ignore[arg-type]
            break
        return pieces
