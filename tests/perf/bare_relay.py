"""A bare relay made of svc's per-chunk parts and nothing else, for
``python -m tests.perf.floor`` (which serves it under granian: ``tests.perf.bare_relay:app``).

``POST /v1/chat/completions`` is served as svc's gateway serves it (``app.http.streams``), but
with no metering at all: no key, no Redis, no reservation or settlement, no metrics. Per
request: the body read with svc's ``body_chunks`` and decoded into svc's ``ChatRequest``; the
upstream stream opened with svc's ``StreamingProvider`` (one per worker, made on the worker's
first request, in its loop); the response head sent with ``response_stream``; the relay, in a
task a watcher cancels when the client leaves (as ``serve_chat``'s). Per upstream read, as
svc's relay (``app.completion.relay.Relay.run``): the read's text pieces encoded by svc's
``ChunkEncoder`` and written with one ``send_bytes``; at the end one write with the closing
chunk (finish_reason stop) and ``data: [DONE]``, where svc also puts its metadata chunk.

What svc's relay adds per read (counting tokens against the output cap, the heartbeat's
clock check, the shutdown check, the ``_Body`` wrapper and its first-write metric) is not
here: the floor is what the server, the upstream client and the encoder cost together.

The upstream: ``FLOOR_UPSTREAM_URL``, an OpenAI-compatible base URL ending in ``/v1``.

With ``FLOOR_REDIS_URL`` set, each request also makes the two Redis round trips every metered
request needs, as ``PING`` on svc's pipelined connection (``PipelinedRedis``, one per worker):
one before the upstream is asked (where svc reserves) and one after the last chunk, before
the closing write (where svc settles). The scripts' own work runs inside Valkey, outside the
server's CPU; what this adds is what talking to Redis costs the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator

import msgspec

from app.apis.chat import CHAT
from app.apis.chat.chunks import DONE, ChunkEncoder, error_event
from app.core.errors import ClientDisconnected, UpstreamError
from app.core.ids import completion_ids
from app.http.rsgi.protocol import (
    HTTPProtocol,
    ProtocolClosed,
    Scope,
    StreamTransport,
    body_chunks,
)
from app.http.streams import SSE_HEADERS, STREAM_ROUTES
from app.kv.pipelined import PipelinedRedis
from app.upstream.base import Piece, UpstreamCall
from app.upstream.config import ProviderConfig
from app.upstream.http11 import StreamingProvider
from app.upstream.wire import ChatRequest, Delta
from bench.floor import REDIS_ENV, STREAMS_ENV, UPSTREAM_ENV

REDIS_TIMEOUT_S = 2.0
DEFAULT_MAX_TOKENS = 4096  # sent upstream when the client set no limit (svc: the hold's)
_decode_request = msgspec.json.Decoder(ChatRequest).decode


def _json(protocol: HTTPProtocol, status: int, message: str) -> None:
    body = msgspec.json.encode({"error": {"message": message}})
    headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
    protocol.response_bytes(status, headers, body)


class _Chunks:
    """The chunks of one response: which is first (it carries the role), and the bytes of
    one upstream read."""

    __slots__ = ("encoder", "first")

    def __init__(self, encoder: ChunkEncoder) -> None:
        self.encoder = encoder
        self.first = True

    def take(self, batch: list[Piece]) -> bytes:
        if len(batch) == 1 and type(batch[0]) is str:  # one token in one read: the common case
            return self._text(batch[0]) if batch[0] else b""
        out: list[bytes] = []
        for piece in batch:
            if isinstance(piece, str):
                if piece:
                    out.append(self._text(piece))
            elif isinstance(piece, Delta) and piece.carries_output():
                first, self.first = self.first, False
                out.append(self.encoder.delta(piece, first=first, finish=None))
        return b"".join(out)

    def _text(self, text: str) -> bytes:
        first, self.first = self.first, False
        return self.encoder.content(text, first=first, last=False)

    def closing(self) -> bytes:
        return self.encoder.content("", first=self.first, last=True) + DONE


async def _close(pieces: AsyncIterator[list[Piece]]) -> None:
    aclose = getattr(pieces, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


async def _relay(
    transport: StreamTransport,
    chunks: _Chunks,
    batch: list[Piece],
    pieces: AsyncIterator[list[Piece]],
    redis: PipelinedRedis | None,
) -> None:
    """One write per upstream read, then the closing write (after the settle's round trip,
    with ``redis``). The transport is this coroutine's only reference to the body: granian
    ends the body when it is released."""
    try:
        while True:
            out = chunks.take(batch)
            if out:
                await transport.send_bytes(out)
            try:
                batch = await pieces.__anext__()
            except StopAsyncIteration:
                break
        last = chunks.closing()
    except UpstreamError:
        last = error_event("The upstream failed.", "upstream_error", "upstream_unavailable")
        last += DONE
    finally:
        await _close(pieces)
    if redis is not None:
        await redis.execute("PING")
    await transport.send_bytes(last)


class BareRelay:
    """The RSGI app: chat completions relayed; every other request a 404."""

    def __init__(self) -> None:
        self._provider: StreamingProvider | None = None
        url = os.environ.get(REDIS_ENV)
        self._redis = PipelinedRedis(url, timeout_s=REDIS_TIMEOUT_S) if url else None

    def _upstream(self) -> StreamingProvider:
        if self._provider is None:  # in the worker's process and loop, on its first request
            config = ProviderConfig(
                base_url=os.environ[UPSTREAM_ENV],
                max_connections=int(os.environ.get(STREAMS_ENV, ProviderConfig.max_connections)),
            )
            self._provider = StreamingProvider(config)
        return self._provider

    async def __rsgi__(self, scope: Scope, protocol: HTTPProtocol) -> None:
        if STREAM_ROUTES.get(scope.path) is not CHAT or scope.method != "POST":
            _json(protocol, 404, "not found")
            return
        try:
            async with contextlib.aclosing(body_chunks(scope, protocol)) as body:
                raw = b"".join([chunk async for chunk in body])
        except ClientDisconnected:
            return
        try:
            request = _decode_request(raw)
        except msgspec.DecodeError as exc:  # ValidationError is one
            _json(protocol, 400, str(exc))
            return
        limit = request.max_tokens
        max_tokens = limit if isinstance(limit, int) else DEFAULT_MAX_TOKENS
        if self._redis is not None:
            await self._redis.execute("PING")
        call = UpstreamCall(model=request.model, request=request, max_tokens=max_tokens)
        pieces = self._upstream().stream(call)
        try:
            first = await anext(pieces)
        except UpstreamError as exc:
            await _close(pieces)
            _json(protocol, 502, exc.reason)
            return
        chunks = _Chunks(ChunkEncoder(completion_ids.next(), int(time.time()), request.model))
        # one task per stream, as svc's (app.http.streams): the relay runs in this one, and
        # the client's departure cancels it from a callback on granian's disconnect future
        task = asyncio.current_task()
        assert task is not None
        gone = asyncio.ensure_future(protocol.client_disconnect())
        gone.add_done_callback(lambda done: done.cancelled() or task.cancel())
        try:
            await _relay(
                protocol.response_stream(200, SSE_HEADERS), chunks, first, pieces, self._redis
            )
        except (asyncio.CancelledError, ProtocolClosed):
            pass  # the client went away
        finally:
            gone.cancel()


app = BareRelay()
