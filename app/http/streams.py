"""The streaming endpoints, ``POST /v1/chat/completions`` and ``POST /v1/responses``: served
natively over granian's RSGI, writing their own SSE bytes.

Litestar routes everything else; these skip the framework's response machinery and
middleware, and the ASGI adapter, because they run per token (measured in bench/README.md
and docs/architecture.md). They are not Litestar routes at all:
``app.http.gateway.Gateway`` is their only way in. Both run the same completion (reserve,
stream, settle); an ``Api`` says how its request is read and its stream written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NamedTuple

from app.chat.request import parse_chat_request
from app.core.errors import ApiError, ErrorKind
from app.core.metrics import METRICS
from app.credits import idempotency
from app.credits.outcomes import Replay
from app.http.deps import rsgi_request_address
from app.http.errors import CLIENT_CLOSED_REQUEST, as_api_error
from app.http.headers import SECURITY_HEADERS
from app.http.rsgi import (
    ClientDisconnected,
    HTTPProtocol,
    ProtocolClosed,
    Scope,
    StreamTransport,
    body_chunks,
    content_length,
)
from app.responses.request import parse_responses_request
from app.responses.stream import ResponsesStream

if TYPE_CHECKING:
    from app.chat.completion import Completion
    from app.chat.output import StreamOutput
    from app.chat.request import ChatParams
    from app.credits.outcomes import Identity
    from app.runtime import Services

log = logging.getLogger("svc.http")
SSE_HEADERS = [
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
    *SECURITY_HEADERS,
]


def send_error(protocol: HTTPProtocol, error: ApiError, rid: str) -> None:
    body = error.body()
    headers = [
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
        ("x-request-id", rid),
        *SECURITY_HEADERS,
        *error.headers.items(),
    ]
    protocol.response_bytes(error.status, headers, body)


def _too_large(limit: int) -> ApiError:
    return ApiError(ErrorKind.REQUEST_TOO_LARGE, f"The request body is larger than {limit} bytes.")


async def read_body(scope: Scope, protocol: HTTPProtocol, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes (413) without reading it all;
    ``ClientDisconnected`` when the client leaves before sending it all."""
    declared = content_length(scope.headers)
    if declared is not None:
        if declared > limit:
            raise _too_large(limit)
        # Its size known and allowed, the body is gathered by granian and handed over in
        # one piece: one wait on granian's I/O thread, not one per piece and one for the end.
        try:
            body = await protocol()
        except ProtocolClosed:
            raise ClientDisconnected from None
        if len(body) < declared:
            raise ClientDisconnected
        return body
    chunks: list[bytes] = []
    size = 0
    async with contextlib.aclosing(body_chunks(scope, protocol)) as pieces:
        async for chunk in pieces:
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    return b"".join(chunks)


class Parsed(NamedTuple):
    """A request body read by its API: the completion to run, and how its stream is
    written (``None``: as Chat Completions chunks)."""

    params: ChatParams
    output: Callable[[Completion], StreamOutput] | None


class Api(NamedTuple):
    """A streaming endpoint: its path, and how it reads a request body (or raises the
    ``ApiError`` saying why not)."""

    path: str
    parse: Callable[[Services, bytes], Parsed]


def _limits(services: Services) -> dict[str, int]:
    """The configured limits every request is read with."""
    settings = services.settings
    return {
        "max_messages": settings.max_messages,
        "max_message_chars": settings.max_message_chars,
        "image_token_bound": settings.image_token_bound,
    }


def _parse_chat(services: Services, body: bytes) -> Parsed:
    return Parsed(parse_chat_request(body, services.aliases, **_limits(services)), None)


def _parse_responses(services: Services, body: bytes) -> Parsed:
    request = parse_responses_request(body, services.aliases, **_limits(services))

    def output(completion: Completion) -> StreamOutput:
        return ResponsesStream(
            created_at=completion.created,
            model=completion.params.alias.id,
            requested=completion.params.requested,
            settings=request.settings,
        )

    return Parsed(request.chat, output)


CHAT = Api("/v1/chat/completions", _parse_chat)
RESPONSES = Api("/v1/responses", _parse_responses)
# The paths the Gateway serves the streams on. Litestar answers every other route with or
# without a trailing slash, so these do too (the SDKs never send one): same handler, same
# request id, same metric series.
STREAM_ROUTES = {path: api for api in (CHAT, RESPONSES) for path in (api.path, api.path + "/")}


async def _open(
    api: Api, services: Services, scope: Scope, protocol: HTTPProtocol
) -> tuple[Completion, StreamOutput | None] | Replay:
    if scope.method != "POST":
        raise ApiError(ErrorKind.METHOD_NOT_ALLOWED, f"Use POST for {api.path}.")
    parsed: Parsed | None = None

    key = scope.headers.get(idempotency.HEADER)
    body = b""

    async def reserve(ident: Identity) -> tuple[Completion, StreamOutput | None] | Replay:
        # The body is read once the key is known (a bad key is refused unread), and once
        # only: when Redis lost the key's record, the reservation is tried again with it.
        nonlocal parsed, body
        if parsed is None:
            body = await read_body(scope, protocol, services.settings.max_body_bytes)
            parsed = api.parse(services, body)
        claim = None
        if key is not None:
            claim = idempotency.claim(
                services.layout, ident.pid, key, api.path, body, environment=ident.environment
            )
        completion = await services.completions.open(ident, parsed.params, claim)
        if isinstance(completion, Replay):
            return completion
        return completion, parsed.output(completion) if parsed.output else None

    return await services.auth.authenticated(
        scope.headers.get("authorization"), rsgi_request_address(services, scope), reserve
    )


class _Body:
    """The response body the relay writes, and its time to first byte.

    An RSGI stream has no end marker: granian ends the body when the transport object is
    released. This is its one owner, and lets go of it after the last write, or in ``end``
    when the relay stopped early, so no reference left in a traceback keeps the client
    waiting for more."""

    __slots__ = ("_model", "_started", "_transport", "_written")

    def __init__(self, transport: StreamTransport, model: str, started: float) -> None:
        self._transport: StreamTransport | None = transport
        self._model = model
        self._started = started
        self._written = False

    def send(self, data: bytes, more: bool = True) -> Awaitable[None]:
        """Write ``data``; the caller awaits granian's own awaitable (a plain function, not a
        coroutine: no coroutine object per chunk)."""
        transport = self._transport
        if transport is None:
            raise ProtocolClosed("the response body has ended")
        if not self._written:
            self._written = True
            METRICS.labelled(METRICS.ttfb, self._model).observe(time.perf_counter() - self._started)
        if not more:
            self._transport = None
        return transport.send_bytes(data)

    def end(self) -> None:
        self._transport = None


def _send_replay(protocol: HTTPProtocol, body: bytes, rid: str) -> None:
    """The recorded stream of an Idempotency-Key's first request, sent again whole."""
    headers = [
        *SSE_HEADERS,
        ("content-length", str(len(body))),
        ("x-request-id", rid),
        ("idempotent-replayed", "true"),
    ]
    protocol.response_bytes(200, headers, body)


async def _watch_disconnect(protocol: HTTPProtocol, completion: Completion) -> None:
    await protocol.client_disconnect()
    completion.client_left()  # not a cancellation: the relay may still read the usage report


async def serve_stream(
    api: Api, services: Services, scope: Scope, protocol: HTTPProtocol, rid: str
) -> None:
    """Reserve, stream, settle. Errors before the first byte are plain JSON responses."""
    started = time.perf_counter()
    try:
        opened = await _open(api, services, scope, protocol)
    except ClientDisconnected:
        # Clients do this (a timeout, a cancelled upload): nothing was reserved, nobody
        # is left to answer, and it is no server error.
        log.info("client disconnected before sending the whole request body")
        METRICS.request_done(api.path, CLIENT_CLOSED_REQUEST, "", time.perf_counter() - started)
        return
    except Exception as exc:
        error = as_api_error(exc)
        send_error(protocol, error, rid)
        METRICS.labelled(METRICS.rejections, error.kind.code).inc()
        METRICS.request_done(api.path, error.status, "", time.perf_counter() - started)
        return
    if isinstance(opened, Replay):
        _send_replay(protocol, opened.body, rid)
        METRICS.request_done(api.path, 200, "", time.perf_counter() - started)
        return

    completion, output = opened
    model = completion.params.alias.id
    headers = [*SSE_HEADERS, ("x-request-id", rid)]
    body = _Body(protocol.response_stream(200, headers), model, started)
    METRICS.open_streams.inc()
    relay = asyncio.ensure_future(completion.relay(body.send, output))
    # A completion with an Idempotency-Key runs to its end even when its client leaves
    # (its record keeps the whole stream for the retry); the others stop there.
    watcher = None
    if completion.record is None:
        watcher = asyncio.ensure_future(_watch_disconnect(protocol, completion))
    try:
        await relay  # its last write ended the response
    except (asyncio.CancelledError, ProtocolClosed):
        # The client went away as the ending was written (the relay settled first), or
        # this handler was cancelled. A relay whose client left earlier returns: it read
        # on for the usage report (within its bound) and settled what that report says.
        pass
    finally:
        body.end()
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        METRICS.open_streams.dec()
        METRICS.request_done(api.path, 200, model, time.perf_counter() - started)
