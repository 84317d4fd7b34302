"""The Responses API's stream: the events OpenAI's SDKs parse, written by ``ResponsesStream``
(a ``StreamOutput``, so the relay, its cap and its settlement are the chat path's own).

A response is ``response.created`` and ``response.in_progress``, then output items: a
message (``output_text`` deltas, a refusal's deltas) and function calls (argument deltas),
each opened with ``response.output_item.added`` and closed with its ``.done`` events, then
``response.completed`` (``response.incomplete`` when the output was cut at its cap,
``response.failed`` when the upstream failed or the server shut down), whose response
carries the usage billed and svc's metadata (the response object and its parts are in
``app.apis.responses.response``). Every event has the next ``sequence_number``; ids are svc's
own (no upstream id appears).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from app.apis.responses.response import (
    FunctionCallItem,
    IncompleteDetails,
    MessageItem,
    ResponseError,
    ResponseSettings,
    ResponseState,
    ResponseUsage,
    Status,
    billed_usage,
)
from app.apis.responses.tools import ClientName
from app.apis.responses.wire import ResponsesRequest
from app.completion.output import SHUT_DOWN, UNSETTLED, UPSTREAM_FAILED, StreamEnd, SvcMetadata
from app.completion.request import CompletionRequest
from app.core.ids import hex_id, hex_ids
from app.upstream.base import Usage
from app.upstream.wire import Delta, ToolCallDelta

_encode = msgspec.json.encode
_DELTA = b'%s%s,"logprobs":[],"sequence_number":%d}\n\n'  # head, JSON text, sequence number
# A closed message item and its parts, written once (the item's text is encoded once for
# its .done events and the response's output): OutputTextPart, RefusalPart and MessageItem
# as msgspec encodes them, field for field.
_TEXT_PART = b'{"type":"output_text","text":%s,"annotations":[],"logprobs":[]}'
_REFUSAL_PART = b'{"type":"refusal","refusal":%s}'
_MESSAGE_ITEM = b'{"id":"%s","type":"message","status":"%s","role":"assistant","content":[%s]}'
_PART_EVENT = (
    b'event: %s\ndata: {"type":"%s","sequence_number":%d,'
    b'"item_id":"%s","output_index":%d,"content_index":%d,%s}\n\n'
)
ID_BYTES = 12  # random bytes in each id of a response or its items (24 hex digits)


class _Message:
    """The open message item: its text part and its refusal part, as they stream."""

    __slots__ = ("delta_head", "id", "output_index", "refusal", "refusal_index", "text")

    def __init__(self, item_id: str, output_index: int) -> None:
        self.id = item_id
        self.output_index = output_index
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.refusal_index = -1  # the refusal part's content_index, once it has one
        self.delta_head = (
            b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
            b'"item_id":"%s","output_index":%d,"content_index":0,"delta":'
            % (item_id.encode(), output_index)
        )


class _Call:
    """A function call item as it streams."""

    __slots__ = ("arguments", "call_id", "id", "name", "namespace", "output_index")

    def __init__(self, output_index: int, name: str, names: Mapping[str, ClientName]) -> None:
        self.id, self.call_id = hex_ids("fc_", "call_", random_bytes=ID_BYTES)
        self.output_index = output_index
        client = names.get(name)  # a function of a namespace: as the client named it
        self.namespace: str | UnsetType = client[0] if client else UNSET
        self.name = client[1] if client else name
        self.arguments: list[str] = []

    def item(self, status: Status) -> FunctionCallItem:
        return FunctionCallItem(
            id=self.id,
            status=status,
            arguments="".join(self.arguments),
            call_id=self.call_id,
            name=self.name,
            namespace=self.namespace,
        )


class ResponsesStream:
    """One response's events (``StreamOutput``)."""

    def __init__(
        self,
        *,
        created_at: int,
        model: str,
        requested: str,
        settings: ResponseSettings,
        names: Mapping[str, ClientName] | None = None,
    ) -> None:
        """``names``: the client's (namespace, name) of each function the upstream was
        offered under another name (``app.apis.responses.tools.ChatTools.names``)."""
        # the id of the message most responses have is drawn with the response's
        self.id, self._message_id = hex_ids("resp_svc_", "msg_", random_bytes=ID_BYTES)
        self._created_at = created_at
        self._model = model
        self._requested = requested
        self._settings = settings
        self._names = names or {}
        self._seq = 0
        self._items: list[_Message | _Call] = []
        self._done: dict[int, msgspec.Raw] = {}  # closed items, encoded, by output index
        self._message: _Message | None = None  # the message item open, if one is
        self._calls: dict[int, _Call] = {}  # function calls by the upstream's index
        self._echo: bytes | None = None  # the settings' JSON, without its opening brace
        # what ending() closed, and the sequence number after it: an unsettled end sends
        # those events after all, in place of the lifecycle event that was never sent
        self._closed_at_end: tuple[bytes, int] | None = None

    # -- StreamOutput

    def opening(self, started: Usage | None = None) -> bytes:
        response = self._response("in_progress")  # the same response, told twice
        return self._lifecycle("response.created", response) + self._lifecycle(
            "response.in_progress", response
        )

    def piece(self, piece: str | Delta) -> bytes:
        if type(piece) is str:
            return self._text(piece)
        assert isinstance(piece, Delta)
        out = b""
        if piece.content:
            out += self._text(piece.content)
        if piece.refusal:
            out += self._refusal(piece.refusal)
        if piece.tool_calls is not UNSET:
            for call in piece.tool_calls:
                out += self._call_delta(call)
        # reasoning text is billed but not shown, as OpenAI's Responses API keeps it
        return out

    def closing(self, pending: str | Delta | None, *, tool_calls: bool) -> bytes:
        out = self.piece(pending) if pending is not None else b""
        return out + self._close_all("completed")

    def ending(self, end: StreamEnd) -> bytes:
        out = self._close_all("incomplete")  # a failed stream's items (a completed has none)
        self._closed_at_end = (out, self._seq)
        usage = billed_usage(end)
        svc = SvcMetadata(self._requested, end.credits_used, end.balance)
        if end.outcome in ("upstream_error", "shutdown"):
            why = UPSTREAM_FAILED if end.outcome == "upstream_error" else SHUT_DOWN
            failed = self._response("failed", usage, svc, error=ResponseError("server_error", why))
            return out + self._lifecycle("response.failed", failed)
        if end.capped:
            incomplete = IncompleteDetails("max_output_tokens")
            cut = self._response("incomplete", usage, svc, incomplete=incomplete)
            return out + self._lifecycle("response.incomplete", cut)
        return out + self._lifecycle("response.completed", self._response("completed", usage, svc))

    def unsettled(self) -> bytes:
        if self._closed_at_end is None:
            out = self._close_all("incomplete")
        else:  # the ending was made but not sent: its lifecycle event's number is reused
            out, self._seq = self._closed_at_end
        failed = self._response("failed", error=ResponseError("server_error", UNSETTLED))
        return out + self._lifecycle("response.failed", failed)

    # -- output items

    def _text(self, text: str) -> bytes:
        """A text delta (per token: kept short), in the message item, opened first if need be."""
        message = self._message
        if message is None:
            return self._open_message() + self._text(text)
        message.text.append(text)
        seq = self._seq
        self._seq = seq + 1
        return _DELTA % (message.delta_head, _encode(text), seq)

    def _refusal(self, text: str) -> bytes:
        out = self._open_message()
        message = self._message
        assert message is not None
        if message.refusal_index < 0:
            message.refusal_index = 1
            out += self._part_event(
                "response.content_part.added", message, 1, b'"part":' + _REFUSAL_PART % b'""'
            )
        message.refusal.append(text)
        return out + self._part_event(
            "response.refusal.delta", message, 1, b'"delta":' + _encode(text)
        )

    def _open_message(self) -> bytes:
        if self._message is not None:
            return b""
        item_id, self._message_id = self._message_id or hex_id("msg_", ID_BYTES), ""
        message = _Message(item_id, len(self._items))
        self._message = message
        self._items.append(message)
        return self._event(
            "response.output_item.added",
            output_index=message.output_index,
            item=MessageItem(id=message.id, status="in_progress", content=[]),
        ) + self._part_event(
            "response.content_part.added", message, 0, b'"part":' + _TEXT_PART % b'""'
        )

    def _call_delta(self, delta: ToolCallDelta) -> bytes:
        out = b""
        call = self._calls.get(delta.index)
        function = delta.function if delta.function is not UNSET else None
        if call is None:
            if self._message is not None:  # text comes before calls: its item ends here
                out += self._close_message(self._message, "completed")
            name = function.name if function and function.name else ""
            call = _Call(len(self._items), name, self._names)
            self._calls[delta.index] = call
            self._items.append(call)
            out += self._event(
                "response.output_item.added",
                output_index=call.output_index,
                item=call.item("in_progress"),
            )
        if function and function.arguments:
            call.arguments.append(function.arguments)
            out += self._event(
                "response.function_call_arguments.delta",
                item_id=call.id,
                output_index=call.output_index,
                delta=function.arguments,
            )
        return out

    def _close_all(self, status: Status) -> bytes:
        out = b""
        for item in self._items:
            if item.output_index in self._done:
                continue
            if isinstance(item, _Message):
                out += self._close_message(item, status)
            else:
                out += self._close_call(item, status)
        return out

    def _close_message(self, message: _Message, status: Status) -> bytes:
        self._message = None
        text = _encode("".join(message.text))
        text_part = _TEXT_PART % text
        parts = [text_part]
        out = self._part_event(
            "response.output_text.done", message, 0, b'"text":%s,"logprobs":[]' % text
        )
        out += self._part_event("response.content_part.done", message, 0, b'"part":' + text_part)
        if message.refusal_index >= 0:
            refusal = _encode("".join(message.refusal))
            parts.append(_REFUSAL_PART % refusal)
            out += self._part_event("response.refusal.done", message, 1, b'"refusal":' + refusal)
            out += self._part_event("response.content_part.done", message, 1, b'"part":' + parts[1])
        done = msgspec.Raw(_MESSAGE_ITEM % (message.id.encode(), status.encode(), b",".join(parts)))
        self._done[message.output_index] = done
        return out + self._event(
            "response.output_item.done", output_index=message.output_index, item=done
        )

    def _close_call(self, call: _Call, status: Status) -> bytes:
        item = call.item(status)
        done = msgspec.Raw(_encode(item))
        self._done[call.output_index] = done
        return self._event(
            "response.function_call_arguments.done",
            item_id=call.id,
            output_index=call.output_index,
            name=call.name,
            arguments=item.arguments,
        ) + self._event("response.output_item.done", output_index=call.output_index, item=done)

    # -- events

    def _response(
        self,
        status: Status,
        usage: ResponseUsage | None = None,
        svc: SvcMetadata | UnsetType = UNSET,
        *,
        error: ResponseError | None = None,
        incomplete: IncompleteDetails | None = None,
    ) -> bytes:
        """The response object as it stands, encoded."""
        state = ResponseState(
            id=self.id,
            created_at=self._created_at,
            status=status,
            model=self._model,
            output=[self._done[i] for i in sorted(self._done)],
            usage=usage,
            error=error,
            incomplete_details=incomplete,
            svc=svc,
        )
        if self._echo is None:
            self._echo = b"," + _encode(self._settings)[1:]
        return _encode(state)[:-1] + self._echo  # both JSON objects: one, joined

    def _lifecycle(self, event: str, response: bytes) -> bytes:
        """A lifecycle event: ``response`` is the response object (``_response``)."""
        seq = self._seq
        self._seq += 1
        name = event.encode()
        return b'event: %s\ndata: {"type":"%s","sequence_number":%d,"response":%s}\n\n' % (
            name,
            name,
            seq,
            response,
        )

    def _part_event(
        self, event: str, message: _Message, content_index: int, fields: bytes
    ) -> bytes:
        """An event about one content part of the message item; ``fields``: the event's
        own, as JSON (the parts are written from templates, their text encoded once)."""
        seq = self._seq
        self._seq += 1
        name = event.encode()
        return _PART_EVENT % (
            name,
            name,
            seq,
            message.id.encode(),
            message.output_index,
            content_index,
            fields,
        )

    def _event(self, event: str, **fields: Any) -> bytes:
        seq = self._seq
        self._seq += 1
        body = _encode({"type": event, "sequence_number": seq, **fields})
        return b"event: " + event.encode() + b"\ndata: " + body + b"\n\n"


def responses_stream(
    req: ResponsesRequest, names: Mapping[str, ClientName], params: CompletionRequest, created: int
) -> ResponsesStream:
    """A Responses request's stream (its ``OpenOutput``): the response it writes echoes the
    request's settings as they were served."""
    return ResponsesStream(
        created_at=created,
        model=params.alias.id,
        requested=params.requested,
        settings=ResponseSettings.of(req, params),
        names=names,
    )
