"""Closed-loop streaming load generator.

C workers each send one streaming chat completion after another until the run's time is
up; requests that end during the warm-up are not measured. Every stream is parsed and its
shape verified: through svc, svc's chunk rules (one id, role first, ``stop`` on the last
content chunk, one metadata chunk with exactly the three ``svc`` fields, ``[DONE]``);
direct to an upstream, OpenAI's (content chunks, ``[DONE]``). svc's Responses API and
Anthropic's Messages API (``api``) are checked by rules of their own (``ResponsesChecker``,
``MessagesChecker``).

Two clients: ``aiohttp`` (the fastest streaming client measured here) and ``openai``, the
official SDK, for realism (on the Messages API, Anthropic's SDK). Run it as ``python -m bench
load …``; it prints one JSON object.
"""

from __future__ import annotations

import asyncio
import importlib
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from bench.looplag import LagProbe, LagSummary
from bench.sse import SSEParser

MESSAGES = [{"role": "user", "content": "Write one short sentence about load testing."}]


class LoadConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One measured point: where to send, how hard and for how long."""

    base_url: str  # ends in /v1
    model: str
    api_key: str = "none"
    svc: bool = True  # verify svc's chunk rules (False: a plain OpenAI-compatible upstream)
    concurrency: int = 10
    duration_s: float = 5.0
    warmup_s: float = 1.0
    ramp_s: float = 0.5  # workers start spread over this long, so connections open gradually
    max_requests: int = 1_000_000  # a bound on the whole run, warm-up included
    timeout_s: float = 30.0  # per request
    client: str = "aiohttp"  # or "openai", or "raw" (bench.rawclient: chat, the scale levels)
    api: str = "chat"  # or "responses" (POST /v1/responses), "messages" (POST /v1/messages)
    max_tokens: int | None = None
    extra_headers: dict[str, str] = {}
    # one of several load processes (bench.shards): start at this wall-clock time, so that
    # their windows line up, and return every sample, so that percentiles are merged
    start_at: float | None = None
    raw: bool = False


class Percentiles(msgspec.Struct, frozen=True):
    p50: float
    p90: float
    p99: float


class RawSamples(msgspec.Struct, array_like=True):
    """Every measured sample of one load process, in milliseconds (``LoadConfig.raw``)."""

    ttfb_ms: list[float]
    latency_ms: list[float]
    inter_chunk_ms: list[float]


class LoadResult(msgspec.Struct, kw_only=True):
    """What one point measured. Latencies in milliseconds."""

    concurrency: int
    client: str
    requests: int  # completed successfully inside the measured window
    rps: float
    ttfb_ms: Percentiles  # time to the first chunk with content (non-empty delta.content)
    latency_ms: Percentiles  # time to the end of the stream
    errors: dict[str, int]  # by kind, measured window only
    errors_outside_window: dict[str, int]  # by kind, warm-up and drain
    client_cpu_ms_per_request: float
    client_cpu_share: float  # client CPU time / wall time (1.0 = one core saturated)
    window_s: float
    total_requests: int  # every request sent, warm-up and drain included
    total_ok: int
    credits_used: int  # Σ svc.credits_used over every successful stream (svc only)
    # between consecutive chunks with content, within a stream (successful streams that
    # ended inside the window); chunks that arrive in one read are a gap of ~0
    inter_chunk_ms: Percentiles = Percentiles(0.0, 0.0, 0.0)
    content_chunks: int = 0  # chunks with content in those streams
    chunks_per_s: float = 0.0  # content_chunks / window
    total_content_chunks: int = 0  # chunks with content in every stream, warm-up included
    # the measured window's start and end on the wall clock (time.time()), so that what the
    # orchestrator samples meanwhile (a server's CPU) can be read over the window alone
    window_wall: tuple[float, float] | None = None
    # each load process's CPU share and event-loop lag over the window (bench.looplag)
    processes: list[tuple[float, LagSummary]] = []
    raw: RawSamples | None = None  # with LoadConfig.raw: the samples, for bench.shards


class StreamShapeError(Exception):
    """The stream broke a wire rule; the message names which."""


class _Delta(msgspec.Struct):
    role: str | None = None
    content: str | None = None


class _Choice(msgspec.Struct):
    index: int
    delta: _Delta
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    id: str = ""
    object: str = ""
    model: str = ""
    choices: list[_Choice] = []
    svc: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
SVC_FIELDS = frozenset({"requested_model", "credits_used", "balance_remaining"})


class StreamChecker:
    """Checks one stream's events as they arrive; ``finish`` returns the credits used."""

    __slots__ = (
        "content_chunks",
        "done",
        "first_content_at",
        "gaps",
        "id",
        "last_content_at",
        "last_finish",
        "meta",
        "svc",
        "text_chunks",
    )

    def __init__(self, svc: bool) -> None:
        self.svc = svc
        self.id: str | None = None
        self.content_chunks = 0  # chunks with choices (svc: the role rule counts these)
        self.text_chunks = 0  # chunks with non-empty delta.content
        self.last_finish: str | None = None
        self.meta: dict[str, Any] | None = None
        self.done = False
        self.first_content_at = 0.0
        self.last_content_at = 0.0
        self.gaps: list[float] = []  # ms between consecutive chunks with content

    def event(self, data: str, name: str | None = None) -> None:
        """One event's data (and its ``event:`` name, which chat streams do not use)."""
        if self.done:
            raise StreamShapeError("data after [DONE]")
        if data == "[DONE]":
            self.done = True
            return
        chunk = _decode_chunk(data)
        if chunk.error is not None:
            raise StreamShapeError("error event: " + str(chunk.error.get("code")))
        if self.svc:
            self._svc_rules(chunk)
        elif chunk.choices and chunk.choices[0].delta.content:
            self.content_chunks += 1
        if chunk.choices and chunk.choices[0].delta.content:
            self.text(time.perf_counter())

    def text(self, now: float) -> None:
        """A chunk with content arrived at ``now`` (``time.perf_counter()``)."""
        if self.text_chunks:
            self.gaps.append((now - self.last_content_at) * 1000)
        else:
            self.first_content_at = now
        self.last_content_at = now
        self.text_chunks += 1

    def _svc_rules(self, chunk: _Chunk) -> None:
        if self.id is None:
            if not chunk.id.startswith("chatcmpl-svc-"):
                raise StreamShapeError("id is not chatcmpl-svc-<n>")
            self.id = chunk.id
        elif chunk.id != self.id:
            raise StreamShapeError("id changed within the stream")
        if self.meta is not None:
            raise StreamShapeError("chunk after the metadata chunk")
        if not chunk.choices:
            if chunk.svc is None or set(chunk.svc) != SVC_FIELDS:
                raise StreamShapeError("metadata chunk without exactly the three svc fields")
            if self.last_finish != "stop":
                raise StreamShapeError("last content chunk lacks finish_reason stop")
            self.meta = chunk.svc
            return
        if chunk.svc is not None:
            raise StreamShapeError("svc object on a content chunk")
        if self.last_finish is not None:
            raise StreamShapeError("content after finish_reason")
        choice = chunk.choices[0]
        if (choice.delta.role == "assistant") != (self.content_chunks == 0):
            raise StreamShapeError("role must be on the first content chunk only")
        self.last_finish = choice.finish_reason
        self.content_chunks += 1

    def finish(self) -> int:
        if not self.done:
            raise StreamShapeError("stream ended without [DONE]")
        if self.svc:
            if self.meta is None:
                raise StreamShapeError("no metadata chunk")
            return int(self.meta["credits_used"])
        if not self.text_chunks:
            raise StreamShapeError("no content chunk")
        return 0


class _Response(msgspec.Struct):
    """What the checker reads of a lifecycle event's response (the rest is skipped)."""

    id: str = ""
    svc: dict[str, Any] | None = None


class _ResponseEvent(msgspec.Struct):
    type: str
    sequence_number: int = -1
    delta: str | None = None
    response: _Response | None = None


_decode_response_event = msgspec.json.Decoder(_ResponseEvent).decode
RESPONSE_END = frozenset({"response.completed", "response.incomplete"})


class ResponsesChecker(StreamChecker):
    """Checks one Responses API stream from svc: sequence numbers counting up from 0, one
    response id, text deltas, and a last event that completes the response with the three
    svc fields. (No ``[DONE]``: the stream ends with the body.)"""

    __slots__ = ("sequence",)

    def __init__(self) -> None:
        super().__init__(svc=True)
        self.sequence = 0

    def event(self, data: str, name: str | None = None) -> None:
        if self.done:
            raise StreamShapeError("event after the response ended")
        event = _decode_response_event(data)
        if event.sequence_number != self.sequence:
            raise StreamShapeError("sequence_number out of order")
        self.sequence += 1
        if event.type == "response.output_text.delta":
            if event.delta:
                self.text(time.perf_counter())
            return
        if event.response is None:
            return
        if self.id is None:
            if not event.response.id.startswith("resp_svc_"):
                raise StreamShapeError("response id is not resp_svc_...")
            self.id = event.response.id
        elif event.response.id != self.id:
            raise StreamShapeError("response id changed within the stream")
        if event.type == "response.failed":
            raise StreamShapeError("response.failed")
        if event.type in RESPONSE_END:
            svc = event.response.svc
            if not isinstance(svc, dict) or set(svc) != SVC_FIELDS:
                raise StreamShapeError("last response without exactly the three svc fields")
            self.meta = svc
            self.done = True

    def finish(self) -> int:
        if not self.done or self.meta is None:
            raise StreamShapeError("stream ended before the response completed")
        return int(self.meta["credits_used"])


class _MessagesDelta(msgspec.Struct):
    """A ``content_block_delta``'s delta or a ``message_delta``'s (the rest is skipped)."""

    type: str = ""
    text: str | None = None
    stop_reason: str | None = None


class _Message(msgspec.Struct):
    id: str = ""


class _MessagesEvent(msgspec.Struct):
    """What the checker reads of one Messages API event (the rest is skipped)."""

    type: str
    index: int = -1
    delta: _MessagesDelta | None = None
    message: _Message | None = None
    svc: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


_decode_messages_event = msgspec.json.Decoder(_MessagesEvent).decode


class MessagesChecker(StreamChecker):
    """Checks one Messages API stream from svc (``POST /v1/messages``), as Anthropic's
    clients read it: each event's ``event:`` name is its data's ``type``; ``message_start``
    first, with a ``msg_svc_`` id; content blocks opened, filled and closed in order, each
    non-empty ``text_delta`` a chunk with content; ``message_delta`` with ``stop_reason``
    ``end_turn``; then ``message_stop`` with exactly the three svc fields, and nothing after
    it. An ``error`` event fails the stream. (No ``[DONE]``: ``message_stop`` ends it.)"""

    __slots__ = ("block", "blocks", "stop_reason")

    def __init__(self) -> None:
        super().__init__(svc=True)
        self.blocks = 0  # content blocks opened so far
        self.block = -1  # the open block's index (-1: none)
        self.stop_reason: str | None = None

    def event(self, data: str, name: str | None = None) -> None:
        if self.done:
            raise StreamShapeError("event after message_stop")
        event = _decode_messages_event(data)
        if name is not None and name != event.type:
            raise StreamShapeError("event name is not its data's type")
        if event.type == "content_block_delta":  # the common case: one more piece of a block
            if event.index != self.block or self.block < 0:
                raise StreamShapeError("delta outside its open block")
            if event.delta is not None and event.delta.text:
                self.text(time.perf_counter())
            return
        if event.type == "error":
            raise StreamShapeError("error event: " + str((event.error or {}).get("type")))
        if self.id is None:
            self._start(event)
        elif event.type in ("content_block_start", "content_block_stop"):
            self._block(event)
        elif event.type in ("message_delta", "message_stop"):
            self._end(event)
        elif event.type != "ping":
            raise StreamShapeError(f"unexpected event {event.type}")

    def _start(self, event: _MessagesEvent) -> None:
        if event.type != "message_start" or event.message is None:
            raise StreamShapeError("first event is not message_start")
        if not event.message.id.startswith("msg_svc_"):
            raise StreamShapeError("message id is not msg_svc_...")
        self.id = event.message.id

    def _block(self, event: _MessagesEvent) -> None:
        """A content block opens (the next index, none open, before the message's end) or
        closes (the open one)."""
        if event.type == "content_block_start":
            if self.block >= 0 or event.index != self.blocks or self.stop_reason is not None:
                raise StreamShapeError("content block started out of order")
            self.block = event.index
            self.blocks += 1
        else:
            if event.index != self.block or self.block < 0:
                raise StreamShapeError("content block stopped out of order")
            self.block = -1

    def _end(self, event: _MessagesEvent) -> None:
        """``message_delta`` (every block closed, ``end_turn``), then ``message_stop``."""
        if event.type == "message_delta":
            if self.block >= 0 or self.stop_reason is not None:
                raise StreamShapeError("message_delta with a block open, or twice")
            self.stop_reason = event.delta.stop_reason if event.delta is not None else None
            if self.stop_reason != "end_turn":
                raise StreamShapeError("message_delta's stop_reason is not end_turn")
            return
        if self.stop_reason is None:
            raise StreamShapeError("message_stop before message_delta")
        if event.svc is None or set(event.svc) != SVC_FIELDS:
            raise StreamShapeError("message_stop without exactly the three svc fields")
        self.meta = event.svc
        self.done = True

    def finish(self) -> int:
        if not self.done or self.meta is None:
            raise StreamShapeError("stream ended before message_stop")
        return int(self.meta["credits_used"])


def _checker(cfg: LoadConfig) -> StreamChecker:
    if cfg.api == "responses":
        return ResponsesChecker()
    if cfg.api == "messages":
        return MessagesChecker()
    return StreamChecker(cfg.svc)


class _Sample(msgspec.Struct, array_like=True):
    started: float
    ended: float
    ttfb: float
    error: str | None
    credits: int
    chunks: int = 0  # chunks with content
    gaps: list[float] = []  # ms between them


OneRequest = Callable[[], Awaitable[_Sample]]


# The Messages API needs max_tokens: the alias's default output cap, which a chat request
# without max_tokens is given, so both reserve the same.
MESSAGES_MAX_TOKENS = 4096


def _path(cfg: LoadConfig) -> str:
    return {"responses": "/responses", "messages": "/messages"}.get(cfg.api, "/chat/completions")


def _headers(cfg: LoadConfig) -> dict[str, str]:
    """The key where the API's clients put it: Anthropic's ``x-api-key`` on the Messages API,
    ``Authorization: Bearer`` elsewhere."""
    if cfg.api == "messages":
        auth = {"x-api-key": cfg.api_key, "anthropic-version": "2023-06-01"}
    else:
        auth = {"authorization": f"Bearer {cfg.api_key}"}
    return {**auth, "content-type": "application/json", **cfg.extra_headers}


def _body(cfg: LoadConfig) -> dict[str, Any]:
    if cfg.api == "messages":
        max_tokens = MESSAGES_MAX_TOKENS if cfg.max_tokens is None else cfg.max_tokens
        return {"model": cfg.model, "max_tokens": max_tokens, "messages": MESSAGES, "stream": True}
    if cfg.api == "responses":
        body: dict[str, Any] = {"model": cfg.model, "input": MESSAGES, "stream": True}
        if cfg.max_tokens is not None:
            body["max_output_tokens"] = cfg.max_tokens
        return body
    body = {"model": cfg.model, "messages": MESSAGES, "stream": True}
    if not cfg.svc:
        body["stream_options"] = {"include_usage": True}
    if cfg.max_tokens is not None:
        body["max_tokens"] = cfg.max_tokens
    return body


def _failed(started: float, kind: str) -> _Sample:
    return _Sample(started, time.perf_counter(), 0.0, kind, 0)


def _done(started: float, checker: StreamChecker, credits: int) -> _Sample:
    return _Sample(
        started,
        time.perf_counter(),
        checker.first_content_at,
        None,
        credits,
        checker.text_chunks,
        checker.gaps,
    )


async def _aiohttp_requests(cfg: LoadConfig) -> tuple[OneRequest, Callable[[], Awaitable[None]]]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=cfg.concurrency, force_close=False)
    session = aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=cfg.timeout_s)
    )
    url = cfg.base_url.rstrip("/") + _path(cfg)
    payload = msgspec.json.encode(_body(cfg))
    headers = _headers(cfg)

    async def one() -> _Sample:
        started = time.perf_counter()
        checker = _checker(cfg)
        parser = SSEParser()
        try:
            async with session.post(url, data=payload, headers=headers) as resp:
                if resp.status != 200:
                    await resp.read()
                    return _failed(started, f"http_{resp.status}")
                async for data in resp.content.iter_any():
                    for event in parser.feed(data):
                        checker.event(*event)  # its data and its event: name
            credits = checker.finish()
        except StreamShapeError as exc:
            return _failed(started, f"shape: {exc}")
        except TimeoutError:
            return _failed(started, "timeout")
        except aiohttp.ClientError as exc:
            return _failed(started, type(exc).__name__)
        return _done(started, checker, credits)

    return one, session.close


async def _openai_requests(cfg: LoadConfig) -> tuple[OneRequest, Callable[[], Awaitable[None]]]:
    import openai

    if cfg.api == "messages":
        return await _anthropic_requests(cfg)
    client = openai.AsyncOpenAI(
        base_url=cfg.base_url,
        api_key=cfg.api_key,
        max_retries=0,
        timeout=cfg.timeout_s,
        http_client=_sdk_http_client(openai, cfg.concurrency, cfg.timeout_s),
    )
    body = _body(cfg)

    create = client.responses.create if cfg.api == "responses" else client.chat.completions.create

    async def one() -> _Sample:
        started = time.perf_counter()
        checker = _checker(cfg)
        try:
            stream = await create(**body, extra_headers=cfg.extra_headers or None)
            async for chunk in stream:
                # The SDK has parsed the event already; re-check it against the wire rules.
                checker.event(msgspec.json.encode(chunk.model_dump(exclude_unset=True)).decode())
            if cfg.api == "chat":
                checker.event("[DONE]")  # the SDK consumes the terminator itself
            credits = checker.finish()
        except StreamShapeError as exc:
            return _failed(started, f"shape: {exc}")
        except openai.APIStatusError as exc:
            return _failed(started, f"http_{exc.status_code}")
        except openai.APITimeoutError:
            return _failed(started, "timeout")
        except openai.APIConnectionError:
            return _failed(started, "connect")
        return _done(started, checker, credits)

    return one, client.close


async def _anthropic_requests(
    cfg: LoadConfig,
) -> tuple[OneRequest, Callable[[], Awaitable[None]]]:
    """The Messages API through Anthropic's SDK (``messages.create(stream=True)``, its raw
    events). It takes svc's root URL, sends the key as ``x-api-key``, skips ``ping`` and
    raises an ``error`` event as an ``APIStatusError`` of the stream's status (200)."""
    import anthropic

    client = anthropic.AsyncAnthropic(
        base_url=cfg.base_url.rstrip("/").removesuffix("/v1"),
        api_key=cfg.api_key,
        max_retries=0,
        timeout=cfg.timeout_s,
        http_client=_sdk_http_client(anthropic, cfg.concurrency, cfg.timeout_s),
    )
    body = _body(cfg)

    async def one() -> _Sample:
        started = time.perf_counter()
        checker = MessagesChecker()
        try:
            stream = await client.messages.create(**body, extra_headers=cfg.extra_headers or None)
            async for event in stream:
                # parsed by the SDK already (svc's field in model_extra); re-check the wire rules
                data = msgspec.json.encode(event.model_dump(exclude_unset=True)).decode()
                checker.event(data, event.type)
            credits = checker.finish()
        except StreamShapeError as exc:
            return _failed(started, f"shape: {exc}")
        except anthropic.APIStatusError as exc:
            if exc.status_code == 200:
                return _failed(started, "shape: error event")
            return _failed(started, f"http_{exc.status_code}")
        except anthropic.APITimeoutError:
            return _failed(started, "timeout")
        except anthropic.APIConnectionError:
            return _failed(started, "connect")
        return _done(started, checker, credits)

    return one, client.close


def _sdk_http_client(sdk: Any, concurrency: int, timeout_s: float) -> Any:
    """An HTTP client for an SDK (``openai`` or ``anthropic``) with a pool as large as the
    load, built from the httpx flavour the installed SDK is made on (httpx, or its fork
    httpx2)."""
    base = sdk.DefaultAsyncHttpxClient.__mro__[1]
    http = importlib.import_module(base.__module__.split(".")[0])
    limits = http.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return sdk.DefaultAsyncHttpxClient(limits=limits, timeout=timeout_s)


def _percentiles(values: list[float]) -> Percentiles:
    if not values:
        return Percentiles(0.0, 0.0, 0.0)
    if len(values) == 1:
        return Percentiles(values[0], values[0], values[0])
    q = statistics.quantiles(values, n=100, method="inclusive")
    return Percentiles(round(q[49], 3), round(q[89], 3), round(q[98], 3))


Requests = Callable[[LoadConfig], Awaitable[tuple[OneRequest, Callable[[], Awaitable[None]]]]]


async def run_load(cfg: LoadConfig, factory: Requests | None = None) -> LoadResult:
    """Run one closed-loop point and summarise it; ``factory`` makes its requests when not
    the client ``cfg`` names (``bench.rawclient``, which builds on this module)."""
    if cfg.start_at is not None:  # one of several processes: they all start together
        await asyncio.sleep(max(0.0, cfg.start_at - time.time()))
    if factory is None:
        factory = _openai_requests if cfg.client == "openai" else _aiohttp_requests
    one, close = await factory(cfg)
    samples: list[_Sample] = []
    t0, wall0 = time.perf_counter(), time.time()
    window_start = t0 + cfg.warmup_s
    end = window_start + cfg.duration_s
    cpu_marks: dict[str, float] = {}
    probe = LagProbe()
    probe.start()

    async def mark_window() -> None:
        await asyncio.sleep(max(0.0, window_start - time.perf_counter()))
        cpu_marks["start"] = time.process_time()

    async def worker(index: int) -> None:
        await asyncio.sleep(cfg.ramp_s * index / cfg.concurrency)
        while time.perf_counter() < end and len(samples) < cfg.max_requests:
            samples.append(await one())

    marker = asyncio.ensure_future(mark_window())
    try:
        await asyncio.gather(*(worker(i) for i in range(cfg.concurrency)))
    finally:
        probe.stop()
        await close()
    cpu_marks.setdefault("start", time.process_time())
    await marker
    cpu_end = time.process_time()
    window_end = min(end, time.perf_counter())
    window = max(1e-9, window_end - window_start)
    measured = [s for s in samples if window_start <= s.ended <= window_end]
    outside = [s for s in samples if not window_start <= s.ended <= window_end]
    ok = [s for s in measured if s.error is None]
    cpu_s = cpu_end - cpu_marks["start"]
    ttfbs = [(s.ttfb - s.started) * 1000 for s in ok if s.ttfb]
    latencies = [(s.ended - s.started) * 1000 for s in ok]
    gaps = [g for s in ok for g in s.gaps]
    window_wall = (wall0 + cfg.warmup_s, wall0 + (window_end - t0))
    return LoadResult(
        concurrency=cfg.concurrency,
        client=cfg.client,
        requests=len(ok),
        rps=round(len(ok) / window, 1),
        ttfb_ms=_percentiles(ttfbs),
        latency_ms=_percentiles(latencies),
        errors=dict(Counter(s.error for s in measured if s.error is not None)),
        errors_outside_window=dict(Counter(s.error for s in outside if s.error is not None)),
        client_cpu_ms_per_request=round(cpu_s * 1000 / max(1, len(measured)), 3),
        client_cpu_share=round(cpu_s / window, 3),
        window_s=round(window, 3),
        total_requests=len(samples),
        total_ok=sum(1 for s in samples if s.error is None),
        credits_used=sum(s.credits for s in samples),
        inter_chunk_ms=_percentiles(gaps),
        content_chunks=sum(s.chunks for s in ok),
        chunks_per_s=round(sum(s.chunks for s in ok) / window, 1),
        total_content_chunks=sum(s.chunks for s in samples),
        window_wall=window_wall,
        processes=[(round(cpu_s / window, 3), probe.between(*window_wall))],
        raw=RawSamples(ttfbs, latencies, gaps) if cfg.raw else None,
    )
