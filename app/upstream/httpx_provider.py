"""The OpenAI-compatible provider over ``httpx.AsyncClient``: slower as a streaming client
than aiohttp (README, "Upstream client"), kept for operators who need httpx. A module of its
own so that workers not configured for it never import httpx (about 7 MB per worker)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx

from app.upstream.base import Piece, UpstreamCall, UpstreamError
from app.upstream.config import ProviderConfig
from app.upstream.openai_http import exchange, provider_headers, status_error
from app.upstream.sse import LineSplitter


class HttpxProvider:
    """The same provider over ``httpx.AsyncClient`` (slower as a streaming client). With
    ``aiohttp_transport`` it uses the optional ``httpx-aiohttp`` transport instead."""

    def __init__(self, config: ProviderConfig, *, aiohttp_transport: bool = False) -> None:
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self.headers = provider_headers(config)
        transport: httpx.AsyncBaseTransport | None = None
        if aiohttp_transport:
            from httpx_aiohttp import AiohttpTransport  # optional dependency

            transport = AiohttpTransport()
        self._client = httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(
                connect=config.connect_timeout_s,
                read=config.idle_timeout_s,
                write=config.connect_timeout_s,
                pool=config.connect_timeout_s,
            ),
            limits=httpx.Limits(
                max_connections=config.max_connections,
                max_keepalive_connections=config.max_connections,
            ),
        )

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        ex = exchange(call, self.config)
        request = self._client.build_request(
            "POST", self.base_url + ex.path, content=ex.body, headers=self.headers
        )
        deadline = asyncio.get_running_loop().time() + self.config.first_byte_timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._client.send(request, stream=True)
        except (httpx.HTTPError, OSError, TimeoutError) as exc:
            raise UpstreamError(f"connect failed: {type(exc).__name__}") from exc
        try:
            if response.status_code != 200:
                raise status_error(response.status_code, await response.aread(), call.model)
            splitter = LineSplitter(ex.parse)
            reads = response.aiter_raw()
            first = True
            while not splitter.done:
                try:
                    if first:
                        async with asyncio.timeout_at(deadline):
                            data = await anext(reads)
                    else:
                        data = await anext(reads)
                except StopAsyncIteration:
                    raise UpstreamError("upstream closed the stream early") from None
                except (httpx.HTTPError, OSError, TimeoutError) as exc:
                    raise UpstreamError(f"stream failed: {type(exc).__name__}") from exc
                pieces = splitter.feed(data)
                if pieces:
                    first = False
                    yield pieces
        finally:
            await response.aclose()

    async def close(self) -> None:
        await self._client.aclose()
