"""One HTTP/1.1 connection to an upstream: an asyncio protocol whose responses llhttp
(``httptools``) parses as they arrive, the SSE body turned into pieces inside the protocol's
callback and handed to the reading task through one future per wait (no task or timer per
chunk)."""

from __future__ import annotations

import asyncio
from typing import Protocol

import httptools

from app.core.errors import UpstreamError
from app.upstream.base import Piece
from app.upstream.sse import LineParser, LineSplitter, parse_data_line

# Pieces buffered for a reader that does not keep up (a slow client) past which the socket is
# no longer read: the rest waits in the kernel and, past that, at the upstream.
PAUSE_AT = 128
# An error response's body is read to its end (to keep the connection) but kept only this far.
_ERROR_BODY_KEPT = 64 * 1024
# How long a connection whose stream ended ([DONE]) may take to end its HTTP message (a
# server may write the chunked terminator separately) before it is closed instead of pooled.
_END_GRACE_S = 1.0
_FRAMING_HEADERS = (b"content-length", b"transfer-encoding")


class Owner(Protocol):
    """What a connection tells the pool it belongs to (``app.upstream.http11.pool``)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def finish(self, conn: Connection, *, clean: bool) -> None: ...

    def closed(self, conn: Connection) -> None: ...


class ServerDisconnected(ConnectionError):
    """The server closed the connection before the response ended."""


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection, serving one response at a time; between responses it waits
    in its pool. The parser's callbacks run inside ``data_received``."""

    def __init__(self, pool: Owner) -> None:
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
