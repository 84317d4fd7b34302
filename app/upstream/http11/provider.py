"""One upstream provider over svc's HTTP/1.1 client: a streamed POST per completion, on
the provider's keep-alive pool."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httptools

from app.core.errors import UpstreamError, UpstreamOutcome
from app.core.interrupts import IdleTimeout
from app.core.proxies import proxy_for
from app.upstream.base import Piece, UpstreamCall, idle_timeout_error
from app.upstream.config import ProviderConfig
from app.upstream.http11.connection import Connection
from app.upstream.http11.pool import Pool
from app.upstream.http11.tunnel import Origin
from app.upstream.openai_http import (
    PATHS,
    exchange,
    provider_headers,
    status_error,
    status_outcome,
)
from app.upstream.sse import LineParser

# A pooled connection the server closed unanswered is retried only when it had sat idle this
# long: servers' keep-alive timeouts are seconds (gunicorn 2, uvicorn and Node 5, nginx 75),
# so a shorter idle time means the server took the request and refused it (resending it
# would double it upstream).
STALE_AFTER_S = 1.0
_Failure = (OSError, TimeoutError, httptools.HttpParserError)


class StreamingProvider:
    """One keep-alive pool per provider; one streamed POST per completion."""

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        url = urlsplit(config.base_url.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base_url must be an http or https URL: {config.base_url!r}")
        tls = url.scheme == "https"
        origin = Origin(url.hostname, url.port or (443 if tls else 80), tls)
        self.proxy = proxy_for(url.scheme, url.hostname)
        # a plain http request through a proxy names the whole URL and carries its credentials
        prefix = ""
        via_proxy: dict[str, str] = {}
        if self.proxy is not None and not tls:
            prefix = f"http://{origin.authority}"
            via_proxy = self.proxy.headers
        query = f"?{url.query}" if url.query else ""
        # everything before the length, written once per path (each with its own headers: a
        # Messages provider's key goes as x-api-key there): a request appends the length,
        # its call's own header lines (the trace context, when traces are on) and its body
        start = f"POST {prefix}{url.path}"
        self._request_heads: dict[str, bytes] = {}
        for path in PATHS:
            headers = {"host": origin.host_header, **provider_headers(config, path), **via_proxy}
            lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            head = f"{start}{path}{query} HTTP/1.1\r\n{lines}content-length: "
            self._request_heads[path] = head.encode("latin-1")
        self._pool = Pool(config, origin, self.proxy)

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        # One generator from request to last read: a layer more costs per chunk. One
        # deadline for the first token: connecting, the response head and the first content
        # all count against first_byte_timeout_s together.
        deadline = self._pool.loop.time() + self.config.first_byte_timeout_s
        ex = exchange(call, self.config)
        head = self._request_heads[ex.path]  # ends in "content-length: "; the call's lines follow
        request = head + b"%d\r\n%s\r\n" % (len(ex.body), call.headers) + ex.body
        try:
            async with asyncio.timeout_at(deadline):
                conn = await self._exchange(request, ex.parse)
        except _Failure as exc:
            outcome = _failure_outcome(exc, 0)
            raise UpstreamError(f"connect failed: {type(exc).__name__}", outcome=outcome) from exc
        # sent: not held by this frame through the stream (the request's bytes twice over, its
        # body's size each: a long conversation's tens of KB per open stream)
        del request, ex
        idle: IdleTimeout | None = None
        clean = False
        try:
            if conn.status != 200:
                if call.answered is not None:
                    call.answered(conn.status)
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
            outcome = _failure_outcome(exc, conn.status)
            raise UpstreamError(f"stream failed: {type(exc).__name__}", outcome=outcome) from exc
        finally:
            if idle is not None:
                idle.close()
            self._pool.finish(conn, clean=clean)  # a stream left early is closed, not pooled

    async def _exchange(self, request: bytes, parse: LineParser) -> Connection:
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

    async def _request(self, conn: Connection, request: bytes, parse: LineParser) -> Connection:
        try:
            conn.send(request, parse)
            await conn.head()
        except BaseException:
            conn.close()
            raise
        return conn

    async def close(self) -> None:
        self._pool.close()


def _failure_outcome(exc: BaseException, status: int) -> UpstreamOutcome:
    """The outcome of an attempt the connection failed in (``status``: its response's, 0
    before the response began). An error status stays the outcome when reading its body
    failed; a timeout is one wherever it ran out (TimeoutError is an OSError: first)."""
    if status not in (0, 200):
        return status_outcome(status)
    if isinstance(exc, TimeoutError):
        return "timeout"
    if status == 0 and isinstance(exc, OSError):
        return "connect_error"
    return "stream_error"  # a response that is not HTTP, or a stream broken after its head
