"""OpenAI-compatible providers (OpenAI, vLLM, Ollama, llama.cpp, …) over HTTP.

Two clients sit behind the same ``Provider`` interface; aiohttp is the default because it
measured fastest as a streaming client (README, "Upstream client"); httpx
(``app.upstream.httpx_provider``) is kept for operators who need its features and for the
comparison.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import AsyncIterator

import aiohttp
import msgspec
from msgspec import UNSET

from app.core.interrupts import IdleTimeout
from app.upstream.base import Piece, UpstreamCall, UpstreamError
from app.upstream.config import ProviderConfig
from app.upstream.sse import LineSplitter
from app.upstream.wire import StreamOptions

log = logging.getLogger("svc.upstream")
_encode = msgspec.json.encode
CLIENT_ERROR_STATUSES = frozenset({400, 413, 422})


_USAGE_ALWAYS = StreamOptions(include_usage=True)


def request_body(call: UpstreamCall) -> bytes:
    """The JSON sent upstream: the client's request as it came, with the real model, always
    streaming, usage always requested (svc bills it), one choice, and the output cap the
    reservation affords, under the name the client used for it."""
    req = call.request
    if req.max_completion_tokens not in (UNSET, None):
        limits = {"max_completion_tokens": call.max_tokens, "max_tokens": UNSET}
    else:
        limits = {"max_tokens": call.max_tokens, "max_completion_tokens": UNSET}
    return _encode(
        msgspec.structs.replace(
            req, model=call.model, stream=True, stream_options=_USAGE_ALWAYS, n=UNSET, **limits
        )
    )


def sanitize(message: str, model: str) -> str:
    """An upstream's error message made safe to show: no model name, URL or provider id."""
    text = re.sub(re.escape(model), "the model", message, flags=re.IGNORECASE)
    text = re.sub(r"https?://\S+", "", text)
    return text[:300].strip() or "The request was rejected as invalid."


def provider_headers(config: ProviderConfig) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    if config.api_key_env:
        key = os.environ.get(config.api_key_env)
        if key:
            headers["authorization"] = f"Bearer {key}"
        else:
            log.warning("provider key variable %s is not set", config.api_key_env)
    return headers


def status_error(status: int, body: bytes, model: str) -> UpstreamError:
    if status in CLIENT_ERROR_STATUSES:
        message = ""
        try:
            message = str(msgspec.json.decode(body)["error"]["message"])
        except Exception:
            message = ""
        return UpstreamError(sanitize(message, model), client_error=True)
    return UpstreamError(f"upstream status {status}")


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
        self.url = config.base_url.rstrip("/") + "/chat/completions"
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
        # layer more costs per chunk (bench/reader.py).
        # One deadline for the first token: connecting, the response head and the first
        # content all count against first_byte_timeout_s together.
        deadline = asyncio.get_running_loop().time() + self.config.first_byte_timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._client().post(
                    self.url, data=request_body(call), headers=self.headers
                )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise UpstreamError(f"connect failed: {type(exc).__name__}") from exc
        idle: IdleTimeout | None = None
        try:
            if response.status != 200:
                raise status_error(response.status, await response.read(), call.model)
            # One read takes whatever has arrived: under load that is several events at once.
            splitter = LineSplitter()
            content = response.content
            async with asyncio.timeout_at(deadline):
                pieces = await _first_pieces(content, splitter)
            idle = IdleTimeout(self.config.idle_timeout_s)
            yield pieces
            while not splitter.done:
                idle.read_starts()
                try:
                    data = await content.readany()
                except asyncio.CancelledError:
                    if idle.expired():
                        raise UpstreamError("stream failed: idle timeout") from None
                    raise
                finally:
                    idle.read_ends()
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
