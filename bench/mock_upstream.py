"""A fast OpenAI-compatible streaming mock provider, for tests and the benchmark.

Raw asyncio protocol (uvloop when available), HTTP/1.1 keep-alive, chunked SSE. Faults are
injected per request with the ``x-mock-fault`` header, or by words in the model name, so a
proxy's failover can be tested without headers: ``fail500``, ``fail429``, ``fail400``,
``refuse``, ``stall`` (before the first byte), ``stallafterK``, ``dropK`` (close after K
chunks), ``slowMS`` (MS between chunks), ``tokensNxMS`` (N content chunks, MS apart: a
model writing token by token), ``failonce`` (500 on the first request for that
model name, then normal), ``nousage`` (no usage chunk), ``ignoremax`` (ignore max_tokens),
``dense`` (usage counts one prompt token per character, as CJK text does), ``cachedP``
(usage reports P % of the prompt tokens as ``prompt_tokens_details.cached_tokens``, as
OpenAI does), ``writesP`` (P % as ``cache_write_tokens``, a provider that reports cache
writes apart), ``reasonN`` (N of the completion tokens as
``completion_tokens_details.reasoning_tokens``). A reply stops before the first of the
request's ``stop`` sequences its words hold (the word it begins in cut short), and its
finish chunk names it as vLLM's does (``"stop_reason": "<the sequence>"``).

Faults: ``refuse`` (close without answering), ``500``, ``429``, ``400`` (an OpenAI error that
names the model), ``drop-after:K``, ``stall``, ``stall-after:K``, ``slow-first-byte:MS``.
Per-request ``x-mock-chunks`` and ``x-mock-delay-ms`` override the server's defaults.

``calltool`` in the model name makes a chat stream one tool call instead of text: to the
function the last user message names, else to the first one offered (arguments ``{}``).

``POST /responses`` speaks the Responses API (for providers that serve it natively): the
same words as output text events, the same faults (``dropK`` ends in ``response.failed``
instead), ``response.incomplete`` past ``max_output_tokens``, and a function call to the
first tool instead of text when ``tool_choice`` is ``required`` or the model name says
``calltool``; usage in the last event (``cachedP`` and ``writesP`` as
``input_tokens_details.cached_tokens`` and ``cache_write_tokens``).

``POST /messages`` speaks Anthropic's Messages API (for providers that serve it natively):
``message_start`` with the input usage (``cachedP`` and ``writesP`` as
``cache_read_input_tokens`` and ``cache_creation_input_tokens``, the rest as
``input_tokens``), ``ping``, a thinking block first when the request enables ``thinking``,
the same words as ``text_delta`` events, a ``tool_use`` block to the first tool instead of
text when ``tool_choice`` is ``any`` or ``tool`` or the model name says ``calltool``, then
``message_delta`` (``end_turn``, ``max_tokens`` past ``max_tokens``, ``tool_use``,
``stop_sequence`` with the ``stop_sequence`` the words stopped before, as on chat; the output
tokens) and ``message_stop``. The same faults; ``dropK`` ends in an ``error`` event.

``GET /_stats`` returns counters and the last request; ``POST /_reset`` zeroes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import re
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from bench.looplag import LagProbe, collect_when_idle, lag_answer, no_full_collections
from bench.mock_ticker import Ticker

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
_MODEL_FAULTS = (
    (re.compile(r"fail(500|429|400)"), "{0}"),
    (re.compile(r"refuse"), "refuse"),
    (re.compile(r"stallafter(\d+)"), "stall-after:{0}"),
    (re.compile(r"stall(?!after)"), "stall"),
    (re.compile(r"drop(\d+)"), "drop-after:{0}"),
)
_SLOW = re.compile(r"slow(\d+)")
_TOKENS = re.compile(r"tokens(\d+)x(\d+)")


@dataclass
class Stats:
    requests: int = 0
    connections: int = 0  # TCP connections accepted: fewer than requests means keep-alive
    completed: int = 0
    client_disconnects: int = 0
    in_flight: int = 0
    last_request: Any = None
    last_headers: dict[str, str] = field(default_factory=dict)
    seen_models: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "connections": self.connections,
            "completed": self.completed,
            "client_disconnects": self.client_disconnects,
            "in_flight": self.in_flight,
            "last_request": self.last_request,
            "last_headers": self.last_headers,
            "seen_models": self.seen_models,
        }


@dataclass
class _Plan:
    model: str
    fault: str | None
    chunks: int
    delay_s: float
    cut: bool
    usage: bool
    matched: str | None = None  # the stop sequence the reply stopped before
    tail: str = ""  # then: the last chunk's text, when the match begins inside its word

    def text_stop_reason(self) -> str:
        """The Messages API's ``stop_reason`` of a reply in words."""
        if self.matched is not None:
            return "stop_sequence"
        return "max_tokens" if self.cut else "end_turn"

    def stop_sequence(self, stop_reason: str) -> str | None:
        """The ``stop_sequence`` of a message that ended for ``stop_reason``."""
        return self.matched if stop_reason == "stop_sequence" else None


@dataclass
class Options:
    chunks: int = 20
    delay_ms: float = 0.0
    usage: bool = True
    fault: str | None = None


def _response(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    reason = {
        200: b"OK",
        400: b"Bad Request",
        404: b"Not Found",
        429: b"Too Many Requests",
        500: b"Internal Server Error",
    }.get(status, b"Error")
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
        % (status, reason, content_type, len(body))
        + body
    )


def _error_body(message: str, kind: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": None}}).encode()


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


_encode = msgspec.json.encode
_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
_STREAM_END = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
_ROLE_CHOICE = b'[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]'
_STOP_CHOICE = b'[{"index":0,"delta":{},"finish_reason":"stop"}]'
_LENGTH_CHOICE = b'[{"index":0,"delta":{},"finish_reason":"length"}]'


def _word_choice(i: int) -> bytes:
    word = _encode(WORDS[i % len(WORDS)] + " ")
    return b'[{"index":0,"delta":{"content":%s},"finish_reason":null}]' % word


def _word(plan: _Plan, i: int) -> str:
    """The text of content chunk ``i``: its word, or the word cut before a stop sequence."""
    if plan.tail and i == plan.chunks - 1:
        return plan.tail
    return WORDS[i % len(WORDS)] + " "


def _stop_at(words: int, stop: Any) -> tuple[int, str, str] | None:
    """Where a reply of ``words`` words stops at the request's stop sequences (chat's
    ``stop``, a string or a list; the Messages API's ``stop_sequences``): the chunks left
    (the last cut short when the match begins inside its word), that last one's text when it
    is cut ("" when not), and the sequence; None when the words hold none."""
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    text = "".join(WORDS[i % len(WORDS)] + " " for i in range(words))
    found = [
        (text.find(s), n) for n, s in enumerate(stops) if isinstance(s, str) and s and s in text
    ]
    if not found:
        return None
    at, n = min(found)
    length = 0
    for i in range(words):
        word = WORDS[i % len(WORDS)] + " "
        if length + len(word) > at:
            tail = word[: at - length]
            return (i + 1, tail, stops[n]) if tail else (i, "", stops[n])
        length += len(word)
    return None


_CACHED = re.compile(r"cached(\d+)")
_WRITES = re.compile(r"writes(\d+)")
_REASON = re.compile(r"reason(\d+)")


def _usage(plan: _Plan, request: dict[str, Any]) -> dict[str, Any] | None:
    include = (request.get("stream_options") or {}).get("include_usage")
    if not (include and plan.usage):
        return None
    messages = request.get("messages", [])
    prompt = sum(len(str(m.get("content", ""))) for m in messages)
    if "dense" in plan.model:  # one token per character, as CJK text counts
        prompt_tokens = prompt + 3 * len(messages) + 3
    else:
        prompt_tokens = prompt // 4 + 4 * len(messages)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": plan.chunks,
        "total_tokens": prompt_tokens + plan.chunks,
    }
    if "cached" not in plan.model and "writes" not in plan.model and "reason" not in plan.model:
        return usage  # the benchmark's models: no regex per request
    details = {}
    for pattern, name in ((_CACHED, "cached_tokens"), (_WRITES, "cache_write_tokens")):
        share = pattern.search(plan.model)
        if share:
            details[name] = prompt_tokens * int(share.group(1)) // 100
    if details:
        usage["prompt_tokens_details"] = details
    reasoning = _REASON.search(plan.model)
    if reasoning:
        usage["completion_tokens_details"] = {
            "reasoning_tokens": min(int(reasoning.group(1)), plan.chunks)
        }
    return usage


def _called_tool(request: dict[str, Any], model: str) -> str | None:
    """The function a chat stream calls (``calltool``), or None for text."""
    names = [
        str((tool.get("function") or {}).get("name", ""))
        for tool in request.get("tools") or []
        if isinstance(tool, dict)
    ]
    if "calltool" not in model or not names:
        return None
    users = [m for m in request.get("messages") or [] if m.get("role") == "user"]
    said = str(users[-1].get("content", "")) if users else ""
    return next((name for name in names if name and name in said), names[0])


def _finish(plan: _Plan) -> dict[str, Any]:
    """The choice of the finish chunk: "length" past max_tokens, else "stop", with the stop
    sequence the reply stopped before as vLLM names it (``stop_reason``)."""
    choice: dict[str, Any] = {
        "index": 0,
        "delta": {},
        "finish_reason": "length" if plan.cut else "stop",
    }
    if plan.matched is not None:
        choice["stop_reason"] = plan.matched
    return choice


class _Conn(asyncio.Protocol):
    def __init__(self, server: MockUpstream) -> None:
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.streaming: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.stats.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.streaming is not None and not self.streaming.done():
            self.server.stats.client_disconnects += 1
            self.streaming.cancel()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.streaming is None or self.streaming.done():
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if len(self.buf) < head_end + 4 + length:
                return
            body = self.buf[head_end + 4 : head_end + 4 + length]
            self.buf = self.buf[head_end + 4 + length :]
            method, path = head[0].split(" ")[:2]
            self._dispatch(method, path, headers, body)

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def _dispatch(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        if path.endswith("/chat/completions") and method == "POST":
            if not self._serve_at_once(headers, body):
                self.streaming = asyncio.ensure_future(self._complete(headers, body))
        elif path.endswith("/responses") and method == "POST":
            self.streaming = asyncio.ensure_future(self._complete(headers, body, "responses"))
        elif path.endswith("/messages") and method == "POST":
            self.streaming = asyncio.ensure_future(self._complete(headers, body, "messages"))
        elif path.endswith("/models"):
            data = {"object": "list", "data": [{"id": "mock-model", "object": "model"}]}
            self._write(_response(200, json.dumps(data).encode()))
        elif path.startswith("/_lag"):  # the loop's lag (bench.looplag), ?start=&end= (wall)
            self._write(_response(200, lag_answer(self.server.lag, path)))
        elif path == "/_stats":
            self._write(_response(200, json.dumps(self.server.stats.as_dict()).encode()))
        elif path == "/_reset":
            self.server.stats = Stats()
            self._write(_response(200, b"{}"))
        else:
            self._write(_response(404, _error_body("not found", "invalid_request_error")))

    def _serve_at_once(self, headers: dict[str, str], raw: bytes) -> bool:
        """The common case, no fault: the whole stream encoded at once and written in one
        write, or paced by the mock's one timer (``slowMS``, ``tokensNxMS``), without a task
        (this keeps the mock far from being the bottleneck of a benchmark)."""
        try:
            request = msgspec.json.decode(raw or b"{}")
        except msgspec.DecodeError:
            return False
        stats = self.server.stats
        plan = self._plan(headers, request)
        if plan.fault or not isinstance(request, dict) or "calltool" in plan.model:
            stats.seen_models[plan.model] -= 1  # _stream plans it again
            return False
        stats.requests += 1
        stats.last_request, stats.last_headers = request, headers
        events = self._events(plan, request)
        if plan.delay_s and plan.chunks:  # paced by one timer for all (bench.mock_ticker)
            self._write(_STREAM_HEAD + events[0])
            self.streaming = self.server.ticker.stream(
                self, [*events, _STREAM_END], plan.chunks, plan.delay_s, stats
            )
            return True
        self._write(_STREAM_HEAD + b"".join(events) + _STREAM_END)
        stats.completed += 1
        return True

    def _events(self, plan: _Plan, request: dict[str, Any]) -> list[bytes]:
        """Every event of a stream that runs to its end, as HTTP chunks."""
        envelope = (
            _encode(
                {
                    "id": f"chatcmpl-mock{time.monotonic_ns()}",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": plan.model,
                    "system_fingerprint": "fp_mock",
                }
            )[:-1]
            + b',"choices":'
        )
        events = [_ROLE_CHOICE] + [_word_choice(i) for i in range(plan.chunks)]
        if plan.tail:
            events[-1] = b'[{"index":0,"delta":{"content":%s},"finish_reason":null}]' % _encode(
                plan.tail
            )
        if plan.matched is not None:
            events.append(_encode([_finish(plan)]))
        else:
            events.append(_LENGTH_CHOICE if plan.cut else _STOP_CHOICE)
        usage = _usage(plan, request)
        if usage is not None:
            events.append(b'[],"usage":' + _encode(usage))
        return [_chunk(b"data: " + envelope + e + b"}\n\n") for e in events]

    async def _complete(self, headers: dict[str, str], body: bytes, api: str = "chat") -> None:
        stats = self.server.stats
        stats.requests += 1
        stats.in_flight += 1
        try:
            if api == "responses":
                await self._respond(headers, body)
            elif api == "messages":
                await self._message(headers, body)
            else:
                await self._stream(headers, body)
            stats.completed += 1
        except asyncio.CancelledError:
            pass
        finally:
            stats.in_flight -= 1

    def _plan(self, headers: dict[str, str], request: dict[str, Any]) -> _Plan:
        """What this request gets: fault, chunk count, delay, whether max_tokens cuts it."""
        opts = self.server.options
        stats = self.server.stats
        model = str(request.get("model", ""))
        stats.seen_models[model] = stats.seen_models.get(model, 0) + 1
        fault = headers.get("x-mock-fault") or opts.fault
        for pattern, template in _MODEL_FAULTS:
            match = pattern.search(model)
            if match:
                fault = template.format(*match.groups())
        if "failonce" in model and stats.seen_models[model] == 1:
            fault = "500"
        wanted = int(headers.get("x-mock-chunks", opts.chunks))
        slow = _SLOW.search(model)
        delay_ms = float(slow.group(1)) if slow else opts.delay_ms
        tokens = _TOKENS.search(model)
        if tokens:  # each chunk its own write, ``delay_ms`` after the one before
            wanted, delay_ms = int(tokens.group(1)), float(tokens.group(2))
        max_tokens = (
            request.get("max_completion_tokens")
            or request.get("max_tokens")
            or request.get("max_output_tokens")
        )
        if "ignoremax" in model or max_tokens is None:
            max_tokens = wanted
        plan = _Plan(
            model=model,
            fault=fault,
            chunks=min(wanted, int(max_tokens)),
            delay_s=float(headers.get("x-mock-delay-ms", delay_ms)) / 1000,
            cut=int(max_tokens) < wanted,
            usage=opts.usage and "nousage" not in model,
        )
        stop = request.get("stop") or request.get("stop_sequences")
        found = _stop_at(plan.chunks, stop) if stop else None
        if found is not None:  # the stop comes before the cap
            plan.chunks, plan.tail, plan.matched = found
            plan.cut = False
        return plan

    async def _drop(self) -> None:
        """Break the connection after what was written so far has left: ``abort`` throws
        away whatever is still buffered, which would make the drop point random."""
        transport = self.transport
        if transport is None:
            return
        # asyncio signals nothing when a transport's buffer empties (only the crossing of
        # its high-water mark), so poll: a few milliseconds at most on loopback
        while transport.get_write_buffer_size() and not transport.is_closing():  # noqa: ASYNC110
            await asyncio.sleep(0.001)
        transport.abort()

    async def _stream(self, headers: dict[str, str], raw: bytes) -> None:
        request = json.loads(raw or b"{}")
        stats = self.server.stats
        stats.last_request, stats.last_headers = request, headers
        plan = self._plan(headers, request)
        fault, model, chunks, delay = plan.fault, plan.model, plan.chunks, plan.delay_s
        if await self._early_fault(fault, model):
            return
        drop_after = int(fault.split(":")[1]) if fault and fault.startswith("drop-after") else None
        stall_after = (
            int(fault.split(":")[1]) if fault and fault.startswith("stall-after") else None
        )
        self._write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        cid = f"chatcmpl-mock{time.monotonic_ns()}"
        created = int(time.time())
        base = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_mock",
        }
        self._event(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "finish_reason": None,
                    }
                ],
            }
        )
        called = _called_tool(request, model)
        if called is not None:
            call = {"index": 0, "id": "call_mock1", "type": "function"}
            for delta in (
                {**call, "function": {"name": called, "arguments": ""}},
                {"index": 0, "function": {"arguments": "{}"}},
            ):
                choice = {"index": 0, "delta": {"tool_calls": [delta]}, "finish_reason": None}
                self._event({**base, "choices": [choice]})
            self._event(
                {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
            )
            usage = _usage(plan, request)
            if usage is not None:
                self._event({**base, "choices": [], "usage": {**usage, "completion_tokens": 3}})
            self._write(_STREAM_END)
            return
        for i in range(chunks):
            if drop_after is not None and i == drop_after:
                await self._drop()
                return
            if stall_after is not None and i == stall_after:
                await asyncio.sleep(3600)
            if delay:
                await asyncio.sleep(delay)
            word = _word(plan, i)
            self._event(
                {
                    **base,
                    "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
                }
            )
        self._event({**base, "choices": [_finish(plan)]})
        usage = _usage(plan, request)
        if usage is not None:
            self._event({**base, "choices": [], "usage": usage})
        self._write(_STREAM_END)

    async def _respond(self, headers: dict[str, str], raw: bytes) -> None:
        """A Responses API stream (``POST /responses``)."""
        request = json.loads(raw or b"{}")
        stats = self.server.stats
        stats.last_request, stats.last_headers = request, headers
        plan = self._plan(headers, request)
        if await self._early_fault(plan.fault, plan.model):
            return
        fault = plan.fault or ""
        drop_after = int(fault.split(":")[1]) if fault.startswith("drop-after") else None
        self._write(_STREAM_HEAD)
        seq = iter(range(1_000_000))
        response: dict[str, Any] = {
            "id": f"resp_mock{time.monotonic_ns()}",
            "object": "response",
            "created_at": int(time.time()),
            "model": plan.model,
            "status": "in_progress",
            "output": [],
        }

        def send(kind: str, **fields: Any) -> None:
            event = {"type": kind, "sequence_number": next(seq), **fields}
            self._write(_chunk(b"event: %s\ndata: %s\n\n" % (kind.encode(), _encode(event))))

        send("response.created", response=response)
        tools = request.get("tools") or []
        calls = tools and (request.get("tool_choice") == "required" or "calltool" in plan.model)
        if calls:
            item: dict[str, Any] = {
                "type": "function_call",
                "id": "fc_mock1",
                "call_id": "call_mock1",
                "name": tools[0].get("name", ""),
                "arguments": "",
                "status": "in_progress",
            }
            send("response.output_item.added", output_index=0, item=item)
            pieces = ['{"city": ', '"Paris"}']
            for piece in pieces:
                send(
                    "response.function_call_arguments.delta",
                    item_id="fc_mock1",
                    output_index=0,
                    delta=piece,
                )
            item = {**item, "arguments": "".join(pieces), "status": "completed"}
            send(
                "response.function_call_arguments.done",
                item_id="fc_mock1",
                output_index=0,
                arguments=item["arguments"],
            )
            send("response.output_item.done", output_index=0, item=item)
            output_tokens = 7
        else:
            message = {
                "type": "message",
                "id": "msg_mock1",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            send("response.output_item.added", output_index=0, item=message)
            part = {"type": "output_text", "text": "", "annotations": []}
            send(
                "response.content_part.added",
                item_id="msg_mock1",
                output_index=0,
                content_index=0,
                part=part,
            )
            for i in range(plan.chunks):
                if drop_after is not None and i == drop_after:
                    send(
                        "response.failed",
                        response={
                            **response,
                            "status": "failed",
                            "error": {"code": "server_error", "message": "mock failure"},
                        },
                    )
                    self._write(b"0\r\n\r\n")
                    return
                if plan.delay_s:
                    await asyncio.sleep(plan.delay_s)
                send(
                    "response.output_text.delta",
                    item_id="msg_mock1",
                    output_index=0,
                    content_index=0,
                    delta=WORDS[i % len(WORDS)] + " ",
                )
            output_tokens = plan.chunks
        input_text = json.dumps(request.get("input", "")) + str(request.get("instructions", ""))
        input_tokens = len(input_text) // 4 + 4
        details = {"cached_tokens": 0}
        for pattern, name in ((_CACHED, "cached_tokens"), (_WRITES, "cache_write_tokens")):
            share = pattern.search(plan.model)
            if share:  # as on chat: P % of the input
                details[name] = input_tokens * int(share.group(1)) // 100
        usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": details,
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": len(input_text) // 4 + 4 + output_tokens,
        }
        final = {**response, "usage": usage if plan.usage else None}
        if plan.cut and not calls:
            send(
                "response.incomplete",
                response={
                    **final,
                    "status": "incomplete",
                    "incomplete_details": {"reason": "max_output_tokens"},
                },
            )
        else:
            send("response.completed", response={**final, "status": "completed"})
        self._write(b"0\r\n\r\n")

    async def _message(self, headers: dict[str, str], raw: bytes) -> None:
        """A Messages API stream (``POST /messages``), as Anthropic writes one."""
        request = json.loads(raw or b"{}")
        stats = self.server.stats
        stats.last_request, stats.last_headers = request, headers
        plan = self._plan(headers, request)
        if await self._early_fault(plan.fault, plan.model):
            return
        fault = plan.fault or ""
        drop_after = int(fault.split(":")[1]) if fault.startswith("drop-after") else None

        def send(kind: str, **fields: Any) -> None:
            event = _encode({"type": kind, **fields})
            self._write(_chunk(b"event: %s\ndata: %s\n\n" % (kind.encode(), event)))

        self._write(_STREAM_HEAD)
        prompt = json.dumps(request.get("messages", [])) + json.dumps(request.get("system", ""))
        total = len(prompt) // 4 + 4
        read = written = 0
        for pattern, share in ((_CACHED, "read"), (_WRITES, "written")):
            found = pattern.search(plan.model)
            if found and share == "read":
                read = total * int(found.group(1)) // 100
            elif found:
                written = total * int(found.group(1)) // 100
        written = min(written, total - read)
        start_usage = {
            "input_tokens": total - read - written,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "output_tokens": 1,
        }
        message: dict[str, Any] = {
            "id": f"msg_mock{time.monotonic_ns()}",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": plan.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": start_usage if plan.usage else None,
        }
        send("message_start", message=message)
        send("ping")
        index = output_tokens = 0
        thinking = request.get("thinking") or {}
        if thinking.get("type") == "enabled":
            send(
                "content_block_start",
                index=0,
                content_block={"type": "thinking", "thinking": "", "signature": ""},
            )
            send(
                "content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "Hm."}
            )
            send(
                "content_block_delta",
                index=0,
                delta={"type": "signature_delta", "signature": "c2ln"},
            )
            send("content_block_stop", index=0)
            index, output_tokens = 1, 2
        tools = request.get("tools") or []
        choice = (request.get("tool_choice") or {}).get("type")
        calls = tools and (choice in ("any", "tool") or "calltool" in plan.model)
        if calls:
            block = {
                "type": "tool_use",
                "id": "toolu_mock1",
                "name": tools[0].get("name", ""),
                "input": {},
            }
            send("content_block_start", index=index, content_block=block)
            for piece in ('{"city": ', '"Paris"}'):
                delta = {"type": "input_json_delta", "partial_json": piece}
                send("content_block_delta", index=index, delta=delta)
            send("content_block_stop", index=index)
            output_tokens += 7
            reason = "tool_use"
        else:
            send("content_block_start", index=index, content_block={"type": "text", "text": ""})
            for i in range(plan.chunks):
                if drop_after is not None and i == drop_after:
                    error = {"type": "overloaded_error", "message": "mock failure"}
                    send("error", error=error)
                    self._write(b"0\r\n\r\n")
                    return
                if plan.delay_s:
                    await asyncio.sleep(plan.delay_s)
                delta = {"type": "text_delta", "text": _word(plan, i)}
                send("content_block_delta", index=index, delta=delta)
            send("content_block_stop", index=index)
            output_tokens += plan.chunks
            reason = plan.text_stop_reason()
        end = {"stop_reason": reason, "stop_sequence": plan.stop_sequence(reason)}
        send(
            "message_delta",
            delta=end,
            usage={"output_tokens": output_tokens} if plan.usage else None,
        )
        send("message_stop")
        self._write(b"0\r\n\r\n")

    async def _early_fault(self, fault: str | None, model: str) -> bool:
        if not fault:
            return False
        if fault == "refuse":
            if self.transport is not None:
                self.transport.close()
            return True
        if fault in ("500", "429"):
            self._write(_response(int(fault), _error_body("mock failure", "server_error")))
            return True
        if fault == "400":
            message = f"This model's maximum context length is 8192 tokens ({model})."
            self._write(_response(400, _error_body(message, "invalid_request_error")))
            return True
        if fault == "stall":
            await asyncio.sleep(3600)
            return True
        if fault.startswith("slow-first-byte:"):
            await asyncio.sleep(float(fault.split(":")[1]) / 1000)
        return False

    def _event(self, payload: dict[str, Any]) -> None:
        self._write(_chunk(b"data: " + msgspec.json.encode(payload) + b"\n\n"))


class MockUpstream:
    """The mock server inside the current event loop."""

    def __init__(
        self, chunks: int = 20, delay_ms: float = 0.0, usage: bool = True, fault: str | None = None
    ) -> None:
        self.options = Options(chunks=chunks, delay_ms=delay_ms, usage=usage, fault=fault)
        self.stats = Stats()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0
        self.host = "127.0.0.1"
        self.scheme = "http"
        self.lag: LagProbe | None = None  # started in a process of its own (_serve)
        self.ticker = Ticker()

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}/v1"

    async def start(
        self, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
    ) -> None:
        """Listen on ``host:port`` (0: any free port), over TLS when ``tls`` is given."""
        loop = asyncio.get_running_loop()
        self.host = host
        self.scheme = "https" if tls is not None else "http"
        self._server = await loop.create_server(
            lambda: _Conn(self), host, port, backlog=4096, ssl=tls
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1)


def server_tls(cert_and_key: tuple[str, str]) -> ssl.SSLContext:
    """A server's TLS context from a certificate chain file and its key file."""
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(*cert_and_key)
    return tls


def _serve(
    opts: Options, host: str, port: int, ready: Any, tls: tuple[str, str] | None = None
) -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()

    async def main() -> None:
        mock = MockUpstream(opts.chunks, opts.delay_ms, opts.usage, opts.fault)
        await mock.start(host, port, None if tls is None else server_tls(tls))
        mock.lag = LagProbe()
        mock.lag.start()
        no_full_collections()
        idle = asyncio.ensure_future(collect_when_idle(lambda: not mock.stats.in_flight))
        if ready is not None:
            ready.send(mock.port)
        await asyncio.Event().wait()
        idle.cancel()

    asyncio.run(main())


class MockProcess:
    """The mock in a process of its own (tests and the benchmark keep it off their loop)."""

    def __init__(self, process: Any, port: int, host: str, scheme: str = "http") -> None:
        self.process = process
        self.pid = int(process.pid)
        self.port = port
        self.base_url = f"{scheme}://{host}:{port}/v1"

    def stop(self) -> None:
        self.process.terminate()
        self.process.join(5)


def start_in_subprocess(
    chunks: int = 20,
    delay_ms: float = 0.0,
    usage: bool = True,
    fault: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    tls: tuple[str, str] | None = None,
) -> MockProcess:
    """Start the mock in a child process and wait until it listens; over https when ``tls``
    names a certificate chain file and its key file."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(
        target=_serve,
        args=(Options(chunks, delay_ms, usage, fault), host, port, child, tls),
        daemon=True,
    )
    process.start()
    if not parent.poll(20):
        process.terminate()
        raise RuntimeError("mock upstream did not start")
    return MockProcess(process, int(parent.recv()), host, "https" if tls else "http")
