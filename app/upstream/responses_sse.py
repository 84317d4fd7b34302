"""Parsing the Responses API stream of a provider that serves that API itself.

The events become the pieces a chat completion stream gives (``app.upstream.sse``), so the
relay, the metering and svc's own Responses events are the same whichever API the provider
spoke: output text as text, refusals and reasoning as deltas, each function call as a
tool call of its own index (a namespaced function's under its joined name,
``app.upstream.tool_names``), the end as a finish reason with the usage the provider reported.
Everything else (the provider's ids, its item and part bookkeeping) is svc's to make.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET

from app.core.errors import UpstreamError
from app.upstream.base import CHOICE_END, Piece, Usage
from app.upstream.counts import usage_report
from app.upstream.sse import FinalPieces
from app.upstream.tool_names import namespaced
from app.upstream.wire import Delta, ToolCallDelta, ToolCallFunctionDelta


class _Item(msgspec.Struct):
    type: str = ""
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    namespace: str | None = None
    arguments: str | None = None


class _Details(msgspec.Struct):
    reason: str | None = None


class _Usage(msgspec.Struct):
    """As sent: any JSON, each count checked as one (``app.upstream.counts``)."""

    input_tokens: object = None
    output_tokens: object = None
    input_tokens_details: object = None
    output_tokens_details: object = None


class _Response(msgspec.Struct):
    usage: _Usage | None = None
    incomplete_details: _Details | None = None


class _Event(msgspec.Struct):
    type: str = ""
    delta: str | None = None
    item_id: str | None = None
    item: _Item | None = None
    response: _Response | None = None


_decode_event = msgspec.json.Decoder(_Event).decode

# How a response that stopped short ended, as Chat Completions says it.
_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _usage(usage: _Usage) -> Usage | None:
    return usage_report(
        usage.input_tokens,
        usage.output_tokens,
        usage.input_tokens_details,
        usage.output_tokens_details,
    )


class ResponsesEvents:
    """One Responses stream's events as pieces; a stream's function calls are numbered in
    the order they began. ``parse`` is the line parser of a ``LineSplitter``."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[str, int] = {}  # the provider's item id -> tool call index

    def parse(self, line: bytes) -> list[Piece] | None:
        """The pieces of one SSE line (``FinalPieces`` at the stream's last event), or None
        for a line that carries nothing svc relays."""
        if not line.startswith(b"data:"):
            return None
        try:
            event = _decode_event(line[5:].strip())
        except msgspec.DecodeError as exc:
            raise UpstreamError("malformed event from upstream") from exc
        kind = event.type
        if kind == "response.output_text.delta":
            return [event.delta] if event.delta else None
        if kind == "response.function_call_arguments.delta":
            return self._arguments(event)
        if kind == "response.output_item.added":
            return self._call_begins(event.item)
        if kind == "response.refusal.delta" and event.delta:
            return [Delta(refusal=event.delta)]
        if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            return [Delta(reasoning_content=event.delta)] if event.delta else None
        if kind in ("response.completed", "response.incomplete"):
            return self._end(event.response)
        if kind in ("response.failed", "error"):
            raise UpstreamError("upstream reported an error mid-stream")
        return None

    def _call_begins(self, item: _Item | None) -> list[Piece] | None:
        if item is None or item.type != "function_call":
            return None
        index = len(self._calls)
        self._calls[item.id or f"call {index}"] = index
        name = item.name or ""
        if item.namespace:  # a function of a namespace tool: read as the joined name
            name = namespaced(item.namespace, name)
        call = ToolCallDelta(
            index=index,
            id=item.call_id or UNSET,
            type="function",
            function=ToolCallFunctionDelta(name=name, arguments=item.arguments or ""),
        )
        return [Delta(tool_calls=[call])]

    def _arguments(self, event: _Event) -> list[Piece] | None:
        if not event.delta:
            return None
        index = self._calls.get(event.item_id or "")
        if index is None:
            raise UpstreamError("upstream sent arguments of a call it did not begin")
        call = ToolCallDelta(index=index, function=ToolCallFunctionDelta(arguments=event.delta))
        return [Delta(tool_calls=[call])]

    def _end(self, response: _Response | None) -> FinalPieces:
        details = response.incomplete_details if response is not None else None
        if details is not None and details.reason:
            reason = _INCOMPLETE.get(details.reason, "length")
        else:
            reason = "tool_calls" if self._calls else "stop"
        # a plain stop is no delta, as in a chat stream
        end = FinalPieces(
            [CHOICE_END] if reason == "stop" else [Delta(finish_reason=reason), CHOICE_END]
        )
        usage = None if response is None or response.usage is None else _usage(response.usage)
        if usage is not None:
            end.append(usage)
        return end
