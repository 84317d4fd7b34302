"""Parsing the Messages API stream of a provider that serves Anthropic's API itself.

The events become the pieces a chat completion stream gives (``app.upstream.sse``), so the
relay, the metering and svc's own Messages events are the same whichever API the provider
spoke: a text block's deltas as text, each ``tool_use`` block as a tool call of its own
index (numbered in the order the blocks began, its first piece carrying the provider's
``tool_use`` id and the tool's name, its ``input_json_delta`` pieces the arguments),
thinking as reasoning (billed, not shown), ``message_delta`` as the finish reason (and the
stop sequence matched, for ``stop_sequence``) with the usage, ``message_stop`` as the
stream's end, an ``error`` event as the upstream's failure.

The usage is the prompt as Chat Completions counts it: Anthropic's ``input_tokens`` are only
the prompt's uncached part, so the prompt is those plus the tokens read from the cache
(``cached_tokens``, priced as cached input) and those written to it
(``cache_creation_input_tokens``, priced as cache writes: ``app.completion.settlement``).
``message_start`` reports the input counts; ``message_delta`` the output tokens so far
(cumulative) and, from newer API versions, the input counts again: the last count of each
wins. ``message_start``'s counts also come, as a ``StartUsage``, with the stream's first
output: a client that leaves before ``message_delta`` is billed the provider's prompt
counts (its cache reads and writes at their prices), not svc's estimate of the prompt. A
count that is not one (``app.upstream.counts``) is not taken.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET

from app.core.errors import UpstreamError
from app.upstream.base import CHOICE_END, ChoiceEnd, Piece, StartUsage, Usage
from app.upstream.counts import token_count
from app.upstream.sse import FinalPieces
from app.upstream.wire import Delta, ToolCallDelta, ToolCallFunctionDelta, ToolUseDelta

U = TypeVar("U", bound=Usage)
CACHE_READ = "cached_tokens"
CACHE_WRITE = "cache_creation_input_tokens"


class _Usage(msgspec.Struct):
    """As sent: any JSON, each count checked as one (``app.upstream.counts``)."""

    input_tokens: object = None
    output_tokens: object = None
    cache_read_input_tokens: object = None
    cache_creation_input_tokens: object = None


class _Message(msgspec.Struct):
    usage: _Usage | None = None


class _Block(msgspec.Struct):
    type: str = ""
    id: str | None = None
    name: str | None = None
    text: str | None = None
    input: dict[str, Any] | None = None


class _Delta(msgspec.Struct):
    """A ``content_block_delta``'s delta, or a ``message_delta``'s."""

    type: str = ""
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None


class _Error(msgspec.Struct):
    type: str = ""


class _Event(msgspec.Struct):
    type: str = ""
    index: int | None = None
    message: _Message | None = None
    content_block: _Block | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: _Error | None = None


_decode_event = msgspec.json.Decoder(_Event).decode

# How a message ended, as Chat Completions says it (a plain stop is none: end_turn,
# stop_sequence, with the sequence on its ChoiceEnd, and what Anthropic may add)
_FINISH = {
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_ERROR_TYPE = re.compile(r"[a-z_]{1,40}")


class MessagesEvents:
    """One Messages stream's events as pieces. ``parse`` is the line parser of a
    ``LineSplitter``; the stream ends at ``message_stop`` (``FinalPieces``)."""

    __slots__ = ("_calls", "_counts", "_ended", "_started")

    def __init__(self) -> None:
        self._calls: dict[int, int] = {}  # the provider's block index -> tool call index
        self._counts: dict[str, int] = {}  # the last reported count of each, by its name
        self._ended = False  # message_delta came
        # message_start's counts, until they go out with the first output
        self._started: StartUsage | None = None

    def parse(self, line: bytes) -> list[Piece] | None:
        """The pieces of one SSE line (``FinalPieces`` at ``message_stop``), or None for a
        line that carries nothing svc relays (``event:`` lines, ``ping``, block stops)."""
        if not line.startswith(b"data:"):
            return None
        try:
            event = _decode_event(line[5:].strip())
        except msgspec.DecodeError as exc:
            raise UpstreamError("malformed event from upstream") from exc
        kind = event.type
        if kind == "content_block_delta":
            pieces = self._delta(event)
        elif kind == "content_block_start":
            pieces = self._block_begins(event)
        else:
            return self._event(kind, event)
        if self._started is not None and pieces:
            pieces.insert(0, self._started)  # once, with the first output
            self._started = None
        return pieces

    def _event(self, kind: str, event: _Event) -> list[Piece] | None:
        """The pieces of an event that is not a content block's."""
        if kind == "message_start":
            if event.message is not None:
                self._count(event.message.usage)
                self._started = self._reported(StartUsage)
            return None
        if kind == "message_delta":
            return self._end(event)
        if kind == "message_stop":
            return self._stop()
        if kind == "error":
            found = event.error.type if event.error is not None else ""
            named = found if _ERROR_TYPE.fullmatch(found) else "an error"
            raise UpstreamError(f"upstream reported {named} mid-stream")
        return None

    def _delta(self, event: _Event) -> list[Piece] | None:
        delta = event.delta
        if delta is None:
            return None
        if delta.type == "text_delta":
            return [delta.text] if delta.text else None
        if delta.type == "input_json_delta":
            index = self._calls.get(_index(event))
            if index is None:
                raise UpstreamError("upstream sent the input of a tool call it did not begin")
            if not delta.partial_json:
                return None
            function = ToolCallFunctionDelta(arguments=delta.partial_json)
            return [Delta(tool_calls=[ToolCallDelta(index=index, function=function)])]
        if delta.type == "thinking_delta" and delta.thinking:
            return [Delta(reasoning_content=delta.thinking)]
        return None  # signature_delta, citations_delta, and what Anthropic may add

    def _block_begins(self, event: _Event) -> list[Piece] | None:
        block = event.content_block
        if block is None:
            return None
        if block.type == "text":
            return [block.text] if block.text else None
        if block.type != "tool_use":
            return None  # thinking comes in its deltas; redacted thinking is not shown
        index = len(self._calls)
        self._calls[_index(event)] = index
        arguments = msgspec.json.encode(block.input).decode() if block.input else ""
        call = ToolUseDelta(
            index=index,
            id=block.id if block.id else UNSET,
            type="function",
            function=ToolCallFunctionDelta(name=block.name or "", arguments=arguments),
        )
        return [Delta(tool_calls=[call])]

    def _count(self, usage: _Usage | None) -> None:
        if usage is None:
            return
        counts = self._counts
        for name in _Usage.__struct_fields__:
            value = token_count(getattr(usage, name))
            if value is not None:
                counts[name] = value

    def _reported(self, kind: type[U]) -> U | None:
        """The usage reported so far (a ``kind``), as Chat Completions counts it; None
        before the prompt's count, and for a ``Usage`` (the report at the end) before the
        output's: a report without them is none (svc's estimate bills)."""
        counts = self._counts
        if "input_tokens" not in counts or (kind is Usage and "output_tokens" not in counts):
            return None
        read = counts.get("cache_read_input_tokens", 0)
        written = counts.get(CACHE_WRITE, 0)
        details = {}
        if read:
            details[CACHE_READ] = read
        if written:
            details[CACHE_WRITE] = written
        prompt = counts.get("input_tokens", 0) + read + written
        return kind(prompt, counts.get("output_tokens", 0), details or None)

    def _usage(self) -> list[Piece]:
        """The usage reported so far, as a stream's last pieces (none: nothing)."""
        usage = self._reported(Usage)
        return [] if usage is None else [usage]

    def _end(self, event: _Event) -> list[Piece]:
        self._count(event.usage)
        self._started = None  # a stream without output: the report at its end is the one
        if self._ended:  # another report: the usage again
            return self._usage()
        self._ended = True
        delta = event.delta
        reason = delta.stop_reason if delta is not None else None
        finish = _FINISH.get(reason or "")
        if finish is None and self._calls:
            finish = "tool_calls"
        choice_end = CHOICE_END
        if reason == "stop_sequence" and delta is not None and delta.stop_sequence:
            choice_end = ChoiceEnd(delta.stop_sequence)
        end: list[Piece] = (
            [choice_end] if finish is None else [Delta(finish_reason=finish), choice_end]
        )
        return end + self._usage()

    def _stop(self) -> FinalPieces:
        if self._ended:
            return FinalPieces()
        # a stream without its message_delta: what it reported, if anything
        return FinalPieces([CHOICE_END, *self._usage()])


def _index(event: _Event) -> int:
    return event.index if event.index is not None else -1
