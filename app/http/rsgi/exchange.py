"""``RSGIExchange``: a streaming endpoint's request and response over granian's RSGI
objects (the ``StreamExchange`` that ``app.http.streams`` serves)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.apis.dialect import Headers
from app.core.errors import ClientDisconnected, repeated_header
from app.http.errors import request_too_large
from app.http.rsgi.protocol import (
    HTTPProtocol,
    ProtocolClosed,
    Scope,
    body_chunks,
    content_length,
    parse_address,
)
from app.http.streams import UNREADABLE_HEADER, WriteBody
from app.keys.throttle import client_address

if TYPE_CHECKING:
    from app.runtime import Services


class RSGIExchange:
    """One RSGI request and its response."""

    __slots__ = ("_protocol", "_scope")

    closed: tuple[type[BaseException], ...] = (ProtocolClosed,)

    def __init__(self, scope: Scope, protocol: HTTPProtocol) -> None:
        self._scope = scope
        self._protocol = protocol

    @property
    def method(self) -> str:
        return self._scope.method

    def header(self, name: str) -> str | None:
        headers = self._scope.headers
        value = headers.get(name)
        if value is None and name in headers:
            return UNREADABLE_HEADER  # sent, but not as visible ASCII
        return value

    def single_header(self, name: str, shown: str) -> str | None:
        if len(self._scope.headers.get_all(name)) > 1:
            raise repeated_header(shown)
        return self.header(name)

    def address(self, services: Services) -> str:
        peer = parse_address(self._scope.client)
        forwarded: list[str] = []
        if services.trusted_proxies:
            forwarded = self._scope.headers.get_all("x-forwarded-for")
        return client_address(peer[0] if peer else None, forwarded, services.trusted_proxies)

    async def body(self, limit: int) -> bytes:
        declared = content_length(self._scope.headers)
        if declared is not None:
            if declared > limit:
                raise request_too_large(limit)
            # Its size known and allowed, the body is gathered by granian and handed over in
            # one piece: one wait on granian's I/O thread, not one per piece and one for the
            # end.
            try:
                body = await self._protocol()
            except ProtocolClosed:
                raise ClientDisconnected from None
            if len(body) < declared:
                raise ClientDisconnected
            return body
        chunks: list[bytes] = []
        size = 0
        async with contextlib.aclosing(body_chunks(self._scope, self._protocol)) as pieces:
            async for chunk in pieces:
                size += len(chunk)
                if size > limit:
                    raise request_too_large(limit)
                chunks.append(chunk)
        return b"".join(chunks)

    def answer(self, status: int, headers: Headers, body: bytes) -> None:
        self._protocol.response_bytes(status, headers, body)

    def stream(self, headers: Headers) -> WriteBody:
        # granian ends the body when its transport is released: the caller holds the only
        # reference, through this bound method
        return self._protocol.response_stream(200, headers).send_bytes

    def watch_disconnect(self, left: Callable[[], object]) -> Callable[[], object]:
        # granian's disconnect is a future already: ensure_future hands it back as it is
        gone = asyncio.ensure_future(self._protocol.client_disconnect())
        gone.add_done_callback(lambda done: done.cancelled() or left())
        return gone.cancel
