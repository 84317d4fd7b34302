"""An ASGI app (Litestar) behind granian's RSGI interface.

granian serves one interface per server, and svc's is RSGI, so that the chat route writes
its stream straight into granian (docs/architecture.md). Every other route is Litestar's,
an ASGI app, so each of their requests goes through ``ASGIRequest``: the RSGI scope becomes
an ASGI scope, ``receive`` streams the request body, ``send`` turns the response messages
into one RSGI response.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from app.core.errors import ClientDisconnected
from app.http.rsgi.protocol import HTTPProtocol, Scope, StreamTransport, body_chunks, parse_address

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]

ASGI_VERSION = {"version": "3.0", "spec_version": "2.3"}
# RSGI spells HTTP/1.0 "1"; ASGI wants "1.0" (the other versions are spelt alike)
_HTTP_VERSIONS = {"1": "1.0"}
# The characters a path segment may hold unescaped (RFC 3986 pchar, and "/")
_PATH_SAFE = "/:@!$&'()*+,;=-._~"


def asgi_scope(scope: Scope, state: dict[str, Any]) -> dict[str, Any]:
    """The ASGI HTTP scope of an RSGI request. ``state`` is the lifespan's; the request
    gets a shallow copy of it, as ASGI servers do."""
    return {
        "type": "http",
        "asgi": ASGI_VERSION,
        "http_version": _HTTP_VERSIONS.get(scope.http_version, scope.http_version),
        "method": scope.method,
        "scheme": scope.scheme,
        "path": scope.path,
        # RSGI passes the path decoded only: this is the same path escaped again
        "raw_path": urllib.parse.quote(scope.path, safe=_PATH_SAFE).encode("ascii"),
        # the query string as received: its UTF-8 bytes are the bytes on the wire
        "query_string": scope.query_string.encode(),
        "root_path": "",
        "headers": [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in scope.headers.items()
        ],
        "client": parse_address(scope.client),
        "server": parse_address(scope.server),
        "state": dict(state),
    }


class ASGIRequest:
    """One RSGI request served by an ASGI app. ``extra_headers`` are added to the
    response's; ``status`` is the one sent (500 until a response starts: granian answers
    500 itself to an app that ends without responding)."""

    def __init__(
        self,
        scope: Scope,
        protocol: HTTPProtocol,
        state: dict[str, Any],
        extra_headers: list[tuple[str, str]],
    ) -> None:
        self.scope = asgi_scope(scope, state)
        self.status = 500
        self._protocol = protocol
        self._extra_headers = extra_headers
        self._body: AsyncGenerator[bytes, None] | None = body_chunks(scope, protocol)
        self._start: tuple[int, list[tuple[str, str]]] | None = None
        self._transport: StreamTransport | None = None
        self._responded = asyncio.Event()  # the response has been sent in full

    async def run(self, app: ASGIApp) -> None:
        try:
            await app(self.scope, self.receive, self.send)
        finally:
            # a streamed body ends when its transport is released, also on an exception
            self._transport = None
            await self._close_body()

    async def receive(self) -> Message:
        """The body's chunks as ``http.request`` messages (an empty last one ends it), then
        ``http.disconnect`` once the client has gone or the response has been sent, as
        ASGI has it (Litestar's streamed responses wait for it to finish)."""
        if self._body is not None:
            try:
                chunk = await anext(self._body, None)
            except ClientDisconnected:
                self._body = None
                return {"type": "http.disconnect"}
            if chunk is not None:
                return {"type": "http.request", "body": chunk, "more_body": True}
            self._body = None
            return {"type": "http.request", "body": b"", "more_body": False}
        if not self._responded.is_set():
            await _first_of(self._protocol.client_disconnect(), self._responded.wait())
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
            headers = [
                (name.decode("latin-1"), value.decode("latin-1"))
                for name, value in message.get("headers", ())
            ]
            self._start = (self.status, [*headers, *self._extra_headers])
        elif kind == "http.response.body":
            await self._send_body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r}")

    async def _send_body(self, body: bytes, more: bool) -> None:
        """One body when the first message is the last (``response_bytes``), else a
        stream; ``more`` false ends it (the transport is let go)."""
        transport = self._transport
        if transport is None:
            if self._start is None:
                raise RuntimeError("ASGI body message without a response start")
            status, headers = self._start
            self._start = None
            if not more:
                self._protocol.response_bytes(status, headers, body)
                self._responded.set()
                return
            transport = self._transport = self._protocol.response_stream(status, headers)
        if not more:
            self._transport = None
            self._responded.set()
        if body:
            await transport.send_bytes(body)

    async def _close_body(self) -> None:
        body, self._body = self._body, None
        if body is not None:  # the app did not read it all
            await body.aclose()


async def _first_of(*waits: Awaitable[object]) -> None:
    """Wait until one of ``waits`` is done; the others are cancelled."""
    futures = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future in futures:
            future.cancel()
