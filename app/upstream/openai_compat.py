"""OpenAI-compatible providers (OpenAI, vLLM, Ollama, llama.cpp, …) over aiohttp.

The default client is svc's own (``app.upstream.thin``), which reads a stream for about half
aiohttp's CPU; this one is kept as an option (``SVC_UPSTREAM_CLIENT=aiohttp``) and for the
comparison, as is httpx (``app.upstream.httpx_provider``). A module of its own so that
workers not configured for it never import aiohttp (about 14 MB per worker).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp

from app.core.interrupts import IdleTimeout
from app.upstream.base import Piece, UpstreamCall, UpstreamError, idle_timeout_error
from app.upstream.config import ProviderConfig
from app.upstream.openai_http import exchange, provider_headers, status_error
from app.upstream.sse import LineSplitter


async def _first_pieces(content: aiohttp.StreamReader, splitter: LineSplitter) -> list[Piece]:
    """Read until the stream's first pieces (its head may come in reads of its own)."""
    while not splitter.done:
        data = await content.readany()
        if not data:
            break
        pieces = splitter.feed(data)
        if pieces:
            return pieces
    raise UpstreamError("upstream closed the stream early")


class AiohttpProvider:
    """A pooled aiohttp session per provider; one streamed POST per completion."""

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self.headers = provider_headers(config)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self.config.max_connections, limit_per_host=0, keepalive_timeout=30
            )
            # no sock_read: aiohttp would re-arm a timer on every packet received;
            # IdleTimeout keeps the same limit with one timer per idle period
            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=self.config.connect_timeout_s, sock_read=None
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=timeout, auto_decompress=False
            )
        return self._session

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        # One generator from request to last read: every chunk passes through it, and a
        # layer more costs per chunk (tests/perf/reader.py).
        # One deadline for the first token: connecting, the response head and the first
        # content all count against first_byte_timeout_s together.
        deadline = asyncio.get_running_loop().time() + self.config.first_byte_timeout_s
        ex = exchange(call, self.config)
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._client().post(
                    self.base_url + ex.path, data=ex.body, headers=self.headers
                )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise UpstreamError(f"connect failed: {type(exc).__name__}") from exc
        idle: IdleTimeout | None = None
        try:
            if response.status != 200:
                raise status_error(response.status, await response.read(), call.model)
            # One read takes whatever has arrived: under load that is several events at once.
            splitter = LineSplitter(ex.parse)
            content = response.content
            async with asyncio.timeout_at(deadline):
                pieces = await _first_pieces(content, splitter)
            idle = IdleTimeout(self.config.idle_timeout_s, idle_timeout_error)
            yield pieces
            while not splitter.done:
                with idle:
                    data = await content.readany()
                if not data:
                    raise UpstreamError("upstream closed the stream early")
                pieces = splitter.feed(data)
                if pieces:
                    yield pieces
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise UpstreamError(f"stream failed: {type(exc).__name__}") from exc
        finally:
            if idle is not None:
                idle.close()
            response.close()  # a stream left early must not return to the pool half-read

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
