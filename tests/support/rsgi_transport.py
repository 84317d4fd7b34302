"""An httpx transport that drives an RSGI app in process, as granian would: the tests reach
the very app ``svc serve`` runs (``app.http.rsgi.gateway.Gateway``) without a server.

The fakes keep granian's observable behaviour (granian 2.8, read from its source and
checked against it):

- header names are lower-case, and a value that is not visible ASCII is left out;
- the request body comes as chunks followed by one empty chunk; a client that leaves
  mid-upload just ends it early, without an error;
- the first ``response_*`` call is the response (a later ``response_bytes`` is ignored);
- a streamed body ends when its transport object is released, not when the app returns:
  an app that still holds it makes the response stream fail here instead of hanging;
- once the client has gone, ``client_disconnect`` returns and ``send_bytes`` raises
  ``RSGIProtocolClosed``.

Closing a streamed response before its end (``aclose``) is the client going away.
"""

from __future__ import annotations

import asyncio
import collections
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import httpx
from granian._granian import RSGIProtocolClosed, RSGIProtocolError

from app.http.rsgi.protocol import HTTPProtocol, Scope

RSGIApp = Callable[[Scope, HTTPProtocol], Awaitable[None]]
_VISIBLE_ASCII = frozenset(range(0x20, 0x7F)) | {0x09}


class FakeHeaders:
    """granian's request headers: lower-case names, several values per name kept."""

    def __init__(
        self, pairs: list[tuple[str, str]], unreadable: frozenset[str] = frozenset()
    ) -> None:
        self._pairs = [(name.lower(), value) for name, value in pairs]
        self._unreadable = unreadable  # names sent with a value granian leaves out

    def __contains__(self, key: str) -> bool:
        return any(k == key for k, _ in self._pairs) or key in self._unreadable

    def get(self, key: str, default: None = None) -> str | None:
        return next((v for k, v in self._pairs if k == key), default)

    def get_all(self, key: str) -> list[str]:
        return [v for k, v in self._pairs if k == key]

    def items(self) -> list[tuple[str, str]]:
        return list(self._pairs)

    @classmethod
    def from_raw(cls, raw: list[tuple[bytes, bytes]]) -> FakeHeaders:
        """What granian keeps of raw header lines: values of visible ASCII only."""
        return cls(
            [
                (name.decode("latin-1"), value.decode("ascii"))
                for name, value in raw
                if set(value) <= _VISIBLE_ASCII
            ],
            frozenset(
                name.decode("latin-1").lower()
                for name, value in raw
                if not set(value) <= _VISIBLE_ASCII
            ),
        )


def rsgi_address(host: str, port: int) -> str:
    """An address as RSGI spells it: ``host:port``, ``[::1]:port`` for IPv6."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class FakeScope:
    method: str
    path: str
    headers: FakeHeaders
    query_string: str = ""
    client: str = "127.0.0.1:50000"
    server: str = "127.0.0.1:8000"
    scheme: str = "http"
    http_version: str = "1.1"
    proto: str = "http"
    rsgi_version: str = "1.6"
    authority: str | None = None


@dataclass
class Response:
    """What the app answered: a whole body, or a stream (``body`` None)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes | None


@dataclass
class _Stream:
    """A streamed body's chunks as the client sees them; None marks its end."""

    chunks: collections.deque[bytes | None] = field(default_factory=collections.deque)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def put(self, chunk: bytes | None) -> None:
        self.chunks.append(chunk)
        self.arrived.set()


class FakeStreamTransport:
    def __init__(self, protocol: FakeProtocol, stream: _Stream) -> None:
        self._protocol = protocol
        self._stream = stream

    async def send_bytes(self, data: bytes) -> None:
        if self._protocol.gone.is_set() and self._protocol.writes_notice_disconnect:
            raise RSGIProtocolClosed("RSGI transport is closed")
        self._stream.put(bytes(data))


class FakeProtocol:
    """granian's HTTP protocol object of one request. With ``writes_notice_disconnect``
    false, writes after the client has gone still succeed, as they do in granian until
    the server has noticed."""

    def __init__(
        self,
        body: AsyncIterable[bytes] | Iterable[bytes] = (),
        writes_notice_disconnect: bool = True,
    ) -> None:
        self._body = body
        self.writes_notice_disconnect = writes_notice_disconnect
        self.gone = asyncio.Event()
        self.response: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self.stream = _Stream()

    def disconnect(self) -> None:
        """The client goes away."""
        self.gone.set()

    async def __call__(self) -> bytes:
        return b"".join([chunk async for chunk in self._chunks()])

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        async for chunk in _aiter(self._body):
            if self.gone.is_set():
                break  # granian: the body just ends
            yield chunk
        yield b""

    async def client_disconnect(self) -> None:
        await self.gone.wait()

    def response_bytes(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        if not self.response.done():
            self.response.set_result(Response(status, headers, bytes(body)))

    def response_stream(self, status: int, headers: list[tuple[str, str]]) -> FakeStreamTransport:
        if self.response.done():
            raise RSGIProtocolError("RSGI protocol error")
        self.response.set_result(Response(status, headers, None))
        transport = FakeStreamTransport(self, self.stream)
        weakref.finalize(transport, self.stream.put, None)  # released: the body ends
        return transport


async def _aiter(body: AsyncIterable[bytes] | Iterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(body, AsyncIterable):
        async for chunk in body:
            yield chunk
    else:
        for chunk in body:
            yield chunk


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, protocol: FakeProtocol, app: asyncio.Task[None]) -> None:
        self._protocol = protocol
        self._app = app
        self._ended = False
        app.add_done_callback(lambda _: protocol.stream.arrived.set())

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (chunk := await self._next()) is not None:
            yield chunk
        self._ended = True
        await self._app

    async def _next(self) -> bytes | None:
        stream = self._protocol.stream
        while not stream.chunks:
            if self._app.done():
                self._app.result()  # the app's own exception first
                raise AssertionError(
                    "the app returned but still holds its stream transport: "
                    "granian would keep the response open"
                )
            stream.arrived.clear()
            await stream.arrived.wait()
        return stream.chunks.popleft()

    async def aclose(self) -> None:
        if not self._ended:
            self._protocol.disconnect()  # the client leaves before the end
        await asyncio.wait((self._app,))
        self._app.result()


class RSGITransport(httpx.AsyncBaseTransport):
    """Sends each request to ``app.__rsgi__`` from ``client`` (host, port)."""

    def __init__(self, app: object, client: tuple[str, int] = ("127.0.0.1", 50_000)) -> None:
        self._app: RSGIApp = app.__rsgi__  # type: ignore[attr-defined]
        self._client = rsgi_address(*client)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        scope = FakeScope(
            method=request.method,
            path=request.url.path,
            query_string=request.url.query.decode("ascii"),
            headers=FakeHeaders.from_raw(request.headers.raw),
            client=self._client,
        )
        protocol = FakeProtocol(request.stream)
        app = asyncio.create_task(self._app(scope, protocol))
        await asyncio.wait((protocol.response, app), return_when=asyncio.FIRST_COMPLETED)
        if not protocol.response.done():
            app.result()  # the app raised (granian: a 500, and the error logged)
            return httpx.Response(500)  # the app ended without answering (granian: a 500)
        response = protocol.response.result()
        if response.body is not None:
            await app  # its metrics and logs are done when the response is back
            return httpx.Response(response.status, headers=response.headers, content=response.body)
        stream = _ResponseStream(protocol, app)
        return httpx.Response(response.status, headers=response.headers, stream=stream)
