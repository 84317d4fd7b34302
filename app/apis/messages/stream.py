"""The Messages API's stream: Anthropic's events, written by ``MessagesStream`` (a
``StreamOutput``, so the relay, its cap and its settlement are the chat path's own).

A message is ``message_start`` (svc's id, the alias as the model, and the input counts of a
provider that serves the Messages API as its own ``message_start`` gave them: a chat
upstream reports only at the end, so 0 then, never svc's estimate) and a ``ping``; then its
content blocks, one after another, each opened with ``content_block_start``, filled with
deltas (``text_delta`` for text, ``input_json_delta`` for a ``tool_use`` block's input) and
closed with ``content_block_stop``; then ``message_delta`` (the ``stop_reason`` and the
usage billed) and ``message_stop``, which carries svc's metadata as ``svc``. A stream that
fails after it began ends with an ``error`` event instead (with ``svc`` when it was
settled). Every event is ``event: <type>`` and ``data: <json>``, as Anthropic writes them;
ids are svc's own (``msg_svc_…``, ``toolu_svc_…``; a ``tool_use`` block from a provider that
serves the Messages API keeps that provider's id) and no upstream model name appears.

``stop_reason`` is worked out at the ending from what the relay learned of the upstream's
end (``StreamEnd``: the cap, its finish reason, the stop sequence it matched) and from the
tool calls.
"""

from __future__ import annotations

import re

import msgspec
from msgspec import UNSET

from app.apis.messages.wire import (
    AnthropicErrorDetail,
    DeltaUsage,
    ErrorEvent,
    MessageDelta,
    MessageStart,
    MessageStop,
    StartMessage,
    StartUsage,
    StopDelta,
    StopReason,
)
from app.completion.output import SHUT_DOWN, UNSETTLED, UPSTREAM_FAILED, StreamEnd, SvcMetadata
from app.completion.settlement import CACHE_WRITE_DETAILS
from app.core.ids import hex_id
from app.upstream.base import Usage
from app.upstream.wire import Delta, ToolCallDelta, ToolUseDelta

_encode = msgspec.json.encode
ID_BYTES = 12  # random bytes of each id (24 hex digits)
MESSAGE_PREFIX = "msg_svc_"
TOOL_USE_PREFIX = "toolu_svc_"
_TOOL_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")

# The events written per block and per token, as msgspec encodes their structs (the unit
# tests hold them equal): a delta is its block's head, the JSON text, and the tail.
PING = b'event: ping\ndata: {"type":"ping"}\n\n'
_TEXT_START = (
    b'event: content_block_start\ndata: {"type":"content_block_start","index":%d,'
    b'"content_block":{"type":"text","text":""}}\n\n'
)
_TOOL_START = (
    b'event: content_block_start\ndata: {"type":"content_block_start","index":%d,'
    b'"content_block":{"type":"tool_use","id":%s,"name":%s,"input":{}}}\n\n'
)
_TEXT_HEAD = (
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
    b'"delta":{"type":"text_delta","text":'
)
_JSON_HEAD = (
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
    b'"delta":{"type":"input_json_delta","partial_json":'
)
_DELTA_TAIL = b"}}\n\n"
_BLOCK_STOP = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":%d}\n\n'

API_ERROR = "api_error"
OVERLOADED_ERROR = "overloaded_error"


def stop_reason(
    *, capped: bool, tool_calls: bool, finish: str | None = None, stop_sequence: str | None = None
) -> tuple[StopReason, str | None]:
    """Anthropic's ``stop_reason`` (and ``stop_sequence``) of a completed stream: cut at its
    cap (svc's, or the upstream's ``length``) is ``max_tokens``, tool calls ``tool_use``,
    the upstream's ``content_filter`` ``refusal``, a stop sequence the upstream named
    ``stop_sequence``, anything else ``end_turn``."""
    if capped or finish == "length":
        return "max_tokens", None
    if tool_calls or finish == "tool_calls":
        return "tool_use", None
    if finish == "content_filter":
        return "refusal", None
    if stop_sequence:
        return "stop_sequence", stop_sequence
    return "end_turn", None


def _tool_id(call: ToolCallDelta) -> str:
    """A ``tool_use`` block's id: svc's own, or the id a provider that serves the Messages
    API gave it (a ``ToolUseDelta``): the conversation sends that provider its own id back.
    An id of another form than Anthropic's is replaced by svc's."""
    if type(call) is ToolUseDelta and isinstance(call.id, str) and _TOOL_ID.fullmatch(call.id):
        return call.id
    return hex_id(TOOL_USE_PREFIX, ID_BYTES)


def _input_parts(prompt: int, reported: Usage | None) -> tuple[int, int, int]:
    """A prompt's tokens split as Anthropic's are: the rest, cache writes and cache reads
    (adding up to the prompt), each part clamped as settlement clamps it."""
    details = (reported and reported.prompt_tokens_details) or {}
    cached = min(max(details.get("cached_tokens", 0), 0), prompt)
    writes = max(0, max((details.get(name, 0) for name in CACHE_WRITE_DETAILS), default=0))
    writes = min(writes, prompt - cached)
    return prompt - cached - writes, writes, cached


def billed_usage(end: StreamEnd) -> DeltaUsage:
    """The usage ``message_delta`` reports: the tokens billed, the prompt's split as
    Anthropic's is (``_input_parts``)."""
    rest, writes, cached = _input_parts(end.prompt_tokens, end.reported)
    return DeltaUsage(
        input_tokens=rest,
        cache_creation_input_tokens=writes,
        cache_read_input_tokens=cached,
        output_tokens=end.completion_tokens,
    )


def start_usage(started: Usage | None) -> StartUsage:
    """The usage ``message_start`` reports: the input counts a Messages provider's own
    ``message_start`` gave (as Anthropic's, clients such as LangChain's ``ChatAnthropic``
    read the input there and the output from ``message_delta``), else none. The output
    count stays 0: clients that add the two events' counts up would count it twice."""
    if started is None:
        return StartUsage()
    rest, writes, cached = _input_parts(max(started.prompt_tokens, 0), started)
    return StartUsage(
        input_tokens=rest, cache_creation_input_tokens=writes, cache_read_input_tokens=cached
    )


def error_event(err_type: str, message: str, svc: SvcMetadata | None = None) -> bytes:
    """An ``error`` event: a failure after the stream began, which the SDKs raise."""
    event = ErrorEvent(AnthropicErrorDetail(err_type, message), svc if svc is not None else UNSET)
    return b"event: error\ndata: " + _encode(event) + b"\n\n"


class MessagesStream:
    """One message's events (``StreamOutput``)."""

    __slots__ = (
        "_blocks",
        "_calls",
        "_head",
        "_model",
        "_open",
        "_requested",
        "_text_open",
        "_tool_calls",
        "id",
    )

    def __init__(self, *, model: str, requested: str) -> None:
        """``model``: the alias serving the message (what ``message_start`` names);
        ``requested``: the alias asked for (what ``svc`` names)."""
        self.id = hex_id(MESSAGE_PREFIX, ID_BYTES)
        self._model = model
        self._requested = requested
        self._blocks = 0  # blocks opened so far: the next one's index
        self._open = -1  # the open block's index (-1: none)
        self._text_open = False  # whether that block is text
        self._head = b""  # the open block's delta head
        self._calls: dict[int, tuple[int, bytes]] = {}  # upstream call index: block, head
        self._tool_calls = False

    # -- StreamOutput

    def opening(self, started: Usage | None = None) -> bytes:
        message = StartMessage(id=self.id, model=self._model, usage=start_usage(started))
        start = MessageStart(message)
        return b"event: message_start\ndata: " + _encode(start) + b"\n\n" + PING

    def piece(self, piece: str | Delta) -> bytes:
        if type(piece) is str:
            if self._text_open:  # the common case: one more token of the open text
                return self._head + _encode(piece) + _DELTA_TAIL
            return self._text(piece)
        assert isinstance(piece, Delta)
        out = b""
        if piece.content:
            out += self._text(piece.content)
        if piece.refusal:  # Anthropic has no refusal blocks: a refusal is said in text
            out += self._text(piece.refusal)
        if piece.tool_calls is not UNSET:
            for call in piece.tool_calls:
                out += self._call(call)
        # reasoning is billed but not shown (thinking blocks need Anthropic's signatures)
        return out

    def closing(self, pending: str | Delta | None, *, tool_calls: bool) -> bytes:
        out = self.piece(pending) if pending is not None else b""
        self._tool_calls = tool_calls
        return out + self._close()

    def ending(self, end: StreamEnd) -> bytes:
        svc = SvcMetadata(self._requested, end.credits_used, end.balance)
        if end.outcome == "upstream_error":
            return error_event(API_ERROR, UPSTREAM_FAILED, svc)
        if end.outcome == "shutdown":
            return error_event(OVERLOADED_ERROR, SHUT_DOWN, svc)
        reason, sequence = stop_reason(
            capped=end.capped,
            tool_calls=self._tool_calls,
            finish=end.finish_reason,
            stop_sequence=end.stop_sequence,
        )
        delta = MessageDelta(StopDelta(reason, sequence), billed_usage(end))
        return (
            b"event: message_delta\ndata: "
            + _encode(delta)
            + b"\n\nevent: message_stop\ndata: "
            + _encode(MessageStop(svc))
            + b"\n\n"
        )

    def unsettled(self) -> bytes:
        return error_event(API_ERROR, UNSETTLED)

    # -- content blocks

    def _text(self, text: str) -> bytes:
        out = b""
        if not self._text_open:
            out = self._close()
            index = self._start()
            self._text_open = True
            self._head = _TEXT_HEAD % index
            out += _TEXT_START % index
        return out + self._head + _encode(text) + _DELTA_TAIL

    def _call(self, delta: ToolCallDelta) -> bytes:
        out = b""
        known = self._calls.get(delta.index)
        function = delta.function if delta.function is not UNSET else None
        if known is None:
            out = self._close()
            index = self._start()
            head = _JSON_HEAD % index
            known = self._calls[delta.index] = (index, head)
            name = function.name if function is not None and function.name else ""
            out += _TOOL_START % (index, _encode(_tool_id(delta)), _encode(name))
        if function is not None and function.arguments:
            # a piece of a call whose block has closed (an upstream interleaving its calls)
            # still goes to that block: the SDKs add it to the input they accumulate
            out += known[1] + _encode(function.arguments) + _DELTA_TAIL
        return out

    def _start(self) -> int:
        index = self._open = self._blocks
        self._blocks += 1
        return index

    def _close(self) -> bytes:
        """``content_block_stop`` of the open block, if one is."""
        index = self._open
        if index < 0:
            return b""
        self._open = -1
        self._text_open = False
        return _BLOCK_STOP % index
