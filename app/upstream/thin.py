"""svc's own streaming client for OpenAI-compatible upstreams: HTTP/1.1 on an asyncio
protocol, responses parsed by llhttp (``httptools``), a keep-alive pool per provider.

Why not a general client: reading a token-by-token stream cost aiohttp's client about twice
the CPU per read of this one, and a fast stream about two to three times as much per request
(``python -m tests.perf.reader``). Only what svc needs is here: one POST per completion, its
response parsed as it arrives, the SSE body turned into pieces in the protocol's callback
and handed to the reading task through one future per wait (no task or timer per chunk).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httptools

from app.core.interrupts import IdleTimeout
from app.upstream.base import Piece, UpstreamCall, UpstreamError, idle_timeout_error
from app.upstream.config import ProviderConfig
from app.upstream.openai_http import (
    CHAT_PATH,
    RESPONSES_PATH,
    exchange,
    provider_headers,
    status_error,
)
from app.upstream.sse import LineParser, LineSplitter, parse_data_line

# Pieces buffered for a reader that does not keep up (a slow client) past which the socket is
# no longer read: the rest waits in the kernel and, past that, at the upstream.
PAUSE_AT = 128
# An error response's body is read to its end (to keep the connection) but kept only this far.
_ERROR_BODY_KEPT = 64 * 1024
# How long a connection whose stream ended ([DONE]) may take to end its HTTP message (a
# server may write the chunked terminator separately) before it is closed instead of pooled.
_END_GRACE_S = 1.0
# A pooled connection the server closed unanswered is retried only when it had sat idle this
# long: servers' keep-alive timeouts are seconds (gunicorn 2, uvicorn and Node 5, nginx 75),
# so a shorter idle time means the server took the request and refused it (resending it
# would double it upstream).
STALE_AFTER_S = 1.0
# Idle connections older than this are closed (as aiohttp's keepalive_timeout did): a
# connection a middlebox dropped without a word must not wait for a request to hang on it.
KEEPALIVE_S = 30.0
_FRAMING_HEADERS = (b"content-length", b"transfer-encoding")
_Failure = (OSError, TimeoutError, httptools.HttpParserError)


class ServerDisconnected(ConnectionError):
    """The server closed the connection before the response ended."""


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection, serving one response at a time; between responses it waits
    in its pool. The parser's callbacks run inside ``data_received``."""

    def __init__(self, pool: _Pool) -> None:
        self._pool = pool
        self._loop = pool.loop
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.reused = False  # taken from the pool, not freshly connected
        self.pooled_at = 0.0  # when it last went idle
        self.idle_s = 0.0  # how long it sat idle before this request
        self.idle = False  # waiting in the pool
        self.closed = False
        self.lost = False  # the transport is gone
        self._ending: asyncio.TimerHandle | None = None  # pooled once its message ends
        self._start_response()

    def _start_response(self) -> None:
        self.status = 0
        self.received = False  # any byte of this response
        self.head_done = False
        self.complete = False  # the HTTP message ended
        self.keep_alive = False
        self.ended = False  # the server closed a body delimited by closing
        self.failure: BaseException | None = None
        self._framed = False
        self._splitter = LineSplitter()
        self._pieces: list[Piece] = []
        self._error_body = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    # -- the reading task's side

    def send(self, request: bytes, parse: LineParser) -> None:
        """Send a request whose response stream ``parse`` reads, line by line."""
        assert self.transport is not None
        if parse is not parse_data_line:  # a chat stream's splitter is the one made ready
            self._splitter = LineSplitter(parse)
        self.transport.write(request)

    @property
    def done(self) -> bool:
        """``data: [DONE]`` arrived and every piece before it was taken."""
        return self._splitter.done and not self._pieces

    async def head(self) -> None:
        while not self.head_done:
            if self.failure is not None:
                raise self.failure
            await self._wait()

    async def error_body(self) -> bytes:
        while not (self.complete or self.ended):
            if self.failure is not None:
                raise self.failure
            await self._wait()
        return bytes(self._error_body)

    def take(self) -> list[Piece]:
        """The pieces that arrived since the last call, maybe none."""
        pieces = self._pieces
        if pieces:
            self._pieces = []
            if self._paused:
                self._paused = False
                assert self.transport is not None
                self.transport.resume_reading()
        return pieces

    async def pieces(self) -> list[Piece]:
        """The next pieces, waiting for them; [] once the body ended without more."""
        while not self._pieces:
            if self.failure is not None:
                raise self.failure
            if self._splitter.done or self.complete or self.ended:
                return []
            # the wait written out, not a call of _wait: a coroutine less on every read
            waiter = self._loop.create_future()
            self._waiter = waiter
            await waiter
        return self.take()

    async def _wait(self) -> None:
        waiter = self._loop.create_future()
        self._waiter = waiter
        await waiter

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    # -- after a response

    def reuse(self) -> None:
        """Ready for the next request, on the pool's idle list."""
        self._start_response()
        self.reused = True

    def end_then_reuse(self) -> None:
        """The stream ended but its HTTP message has not yet: pool it once it has."""
        self._ending = self._loop.call_later(_END_GRACE_S, self.close)

    def close(self) -> None:
        """Close for good and give the pool its place back (once)."""
        if self.closed:
            return
        self.closed = True
        if self._ending is not None:
            self._ending.cancel()
            self._ending = None
        if self.transport is not None:
            self.transport.close()
        self._pool.closed(self)

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.idle or self.complete or self.failure is not None:
            self.close()  # nothing may arrive after a response, nor after a failure
            return
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.failure = exc
        if self._ending is not None and self.complete:
            self._ending.cancel()
            self._ending = None
            self._pool.finish(self, clean=True)
            return
        if len(self._pieces) >= PAUSE_AT and not self._paused:
            self._paused = True
            assert self.transport is not None
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        return None  # close the transport: the server will send nothing more

    def connection_lost(self, exc: Exception | None) -> None:
        if self.failure is None and not self.complete:
            if exc is not None:
                self.failure = exc
            elif self.head_done and not self._framed:
                self.ended = True  # the body's end is the connection's
            else:
                self.failure = ServerDisconnected("the server closed the connection")
        self.lost = True
        if self.idle or self._ending is not None:
            self.close()
        self._wake()

    # -- httptools' callbacks

    def on_message_begin(self) -> None:
        if self.complete:  # more after the response: the connection cannot be trusted again
            self.failure = httptools.HttpParserError("data after the response")

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in _FRAMING_HEADERS:
            self._framed = True

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        if self.status != 200:
            if len(self._error_body) < _ERROR_BODY_KEPT:
                self._error_body += body[: _ERROR_BODY_KEPT - len(self._error_body)]
            return
        if self.failure is not None:
            return
        try:
            pieces = self._splitter.feed(body)
        except UpstreamError as exc:  # a malformed chunk, an error event: the reader's to raise
            self.failure = exc
            return
        if pieces:
            if self._pieces:
                self._pieces += pieces
            else:
                self._pieces = pieces

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self._parser.should_keep_alive()


class _Pool:
    """The connections to one upstream: at most ``limit`` open, idle ones reused last in,
    first out (the most recently used is the least likely to have been closed by the server);
    a request finding none free waits in line."""

    def __init__(self, config: ProviderConfig, host: str, port: int, tls: bool) -> None:
        self._host = host
        self._port = port
        self._ssl = ssl.create_default_context() if tls else None
        self._limit = config.max_connections
        self._connect_timeout_s = config.connect_timeout_s
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()  # for close()
        self._opening = 0  # connects under way, counted against the limit
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweep: asyncio.TimerHandle | None = None  # while connections are idle

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        # captured once: asking for the running loop costs a getpid() on Python 3.11
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    async def acquire(self, *, fresh: bool) -> _Connection:
        """An idle connection, or a new one (``fresh``: always a new one), waiting for a free
        place when ``limit`` are open; within the connect timeout."""
        if not fresh and self._idle:
            return self._take_idle()
        async with asyncio.timeout(self._connect_timeout_s):
            first = True
            while True:
                if not fresh and self._idle:
                    return self._take_idle()
                if fresh and self._idle and self._full():
                    self._idle[0].close()  # the oldest idle one makes room
                if not self._full():
                    return await self._connect()
                await self._wait_turn(first)
                first = False

    def _take_idle(self) -> _Connection:
        conn = self._idle.pop()
        conn.idle = False
        conn.idle_s = self.loop.time() - conn.pooled_at
        return conn

    def _full(self) -> bool:
        return len(self._all) + self._opening >= self._limit

    async def _connect(self) -> _Connection:
        self._opening += 1
        try:
            _, conn = await self.loop.create_connection(
                lambda: _Connection(self),
                self._host,
                self._port,
                ssl=self._ssl,
                server_hostname=self._host if self._ssl is not None else None,
            )
        except BaseException:
            self._opening -= 1
            self._pass_turn()
            raise
        self._opening -= 1
        self._all.add(conn)
        return conn

    async def _wait_turn(self, first: bool) -> None:
        """Wait in line; one woken whose turn another took (a request arriving just then)
        waits again at the front."""
        waiter = self.loop.create_future()
        if first:
            self._waiters.append(waiter)
        else:
            self._waiters.appendleft(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._pass_turn()  # woken, then cancelled: the turn goes to the next
            else:
                self._waiters.remove(waiter)
            raise

    def _pass_turn(self) -> None:
        """A place or an idle connection became free: the first in line may take it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def finish(self, conn: _Connection, *, clean: bool) -> None:
        """The stream is over: ``clean`` when it was read to its end, else the connection
        holds an unread rest and is closed."""
        if not clean or conn.closed or conn.lost or conn.failure is not None or conn.ended:
            conn.close()
        elif not conn.complete:
            conn.end_then_reuse()
        elif conn.keep_alive:
            self.release(conn)
        else:
            conn.close()

    def release(self, conn: _Connection) -> None:
        conn.reuse()
        conn.idle = True
        conn.pooled_at = self.loop.time()
        self._idle.append(conn)
        if self._sweep is None:
            self._sweep = self.loop.call_at(conn.pooled_at + KEEPALIVE_S, self._expire)
        self._pass_turn()

    def _expire(self) -> None:
        """Close the connections idle past KEEPALIVE_S (the oldest are first on the list);
        one timer for the pool, re-armed for the next to expire."""
        self._sweep = None
        now = self.loop.time()
        while self._idle and now - self._idle[0].pooled_at >= KEEPALIVE_S:
            self._idle[0].close()
        if self._idle:
            self._sweep = self.loop.call_at(self._idle[0].pooled_at + KEEPALIVE_S, self._expire)

    def closed(self, conn: _Connection) -> None:
        if conn.idle:
            conn.idle = False
            self._idle.remove(conn)
        self._all.discard(conn)
        self._pass_turn()

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for conn in list(self._all):
            conn.close()


class StreamingProvider:
    """One keep-alive pool per provider; one streamed POST per completion."""

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        url = urlsplit(config.base_url.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base_url must be an http or https URL: {config.base_url!r}")
        tls = url.scheme == "https"
        port = url.port or (443 if tls else 80)
        host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
        if port != (443 if tls else 80):
            host = f"{host}:{port}"
        headers = {"host": host, **provider_headers(config)}
        lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        query = f"?{url.query}" if url.query else ""
        # everything before the length, written once per path: a request appends its body
        self._request_heads = {
            path: f"POST {url.path}{path}{query} HTTP/1.1\r\n{lines}content-length: ".encode(
                "latin-1"
            )
            for path in (CHAT_PATH, RESPONSES_PATH)
        }
        self._pool = _Pool(config, url.hostname, port, tls)

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        # One generator from request to last read, as AiohttpProvider's: a layer more costs
        # per chunk. One deadline for the first token: connecting, the response head and the
        # first content all count against first_byte_timeout_s together.
        deadline = self._pool.loop.time() + self.config.first_byte_timeout_s
        ex = exchange(call, self.config)
        request = self._request_heads[ex.path] + b"%d\r\n\r\n" % len(ex.body) + ex.body
        try:
            async with asyncio.timeout_at(deadline):
                conn = await self._exchange(request, ex.parse)
        except _Failure as exc:
            raise UpstreamError(f"connect failed: {type(exc).__name__}") from exc
        idle: IdleTimeout | None = None
        clean = False
        try:
            if conn.status != 200:
                async with asyncio.timeout_at(deadline):
                    error_body = await conn.error_body()
                clean = True
                raise status_error(conn.status, error_body, call.model)
            async with asyncio.timeout_at(deadline):
                pieces = await conn.pieces()
            if not pieces:
                raise UpstreamError("upstream closed the stream early")
            idle = IdleTimeout(self.config.idle_timeout_s, idle_timeout_error)
            yield pieces
            while not conn.done:
                pieces = conn.take()
                if not pieces:
                    with idle:
                        pieces = await conn.pieces()
                    if not pieces:
                        if conn.done:
                            break  # [DONE] came in a read of its own
                        raise UpstreamError("upstream closed the stream early")
                yield pieces
            clean = True
        except _Failure as exc:
            raise UpstreamError(f"stream failed: {type(exc).__name__}") from exc
        finally:
            if idle is not None:
                idle.close()
            self._pool.finish(conn, clean=clean)  # a stream left early is closed, not pooled

    async def _exchange(self, request: bytes, parse: LineParser) -> _Connection:
        """Send the request and read the response's head. A pooled connection the server
        closed while it sat idle (its keep-alive ran out as the request went) fails without a
        byte received: such a failure is retried, once, on a fresh connection, if the
        connection had sat idle long enough for its keep-alive to run out."""
        conn = await self._pool.acquire(fresh=False)
        try:
            return await self._request(conn, request, parse)
        except OSError:
            if not conn.reused or conn.received or conn.idle_s < STALE_AFTER_S:
                raise
        conn = await self._pool.acquire(fresh=True)
        return await self._request(conn, request, parse)

    async def _request(self, conn: _Connection, request: bytes, parse: LineParser) -> _Connection:
        try:
            conn.send(request, parse)
            await conn.head()
        except BaseException:
            conn.close()
            raise
        return conn

    async def close(self) -> None:
        self._pool.close()
