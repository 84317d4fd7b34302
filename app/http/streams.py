"""The streaming endpoints, ``POST /v1/chat/completions``, ``POST /v1/responses`` and
``POST /v1/messages`` (Anthropic's Messages API), which write their own SSE bytes.

Litestar routes everything else; these skip the framework's response machinery per chunk
(measured: docs/architecture.md, "Why the chat route writes its own bytes"). What they do
is here, free of any server: a request comes as a ``StreamExchange``, which
``app.http.rsgi`` implements over granian's RSGI, the one place that knows the server.
Every endpoint runs the same completion (reserve, stream, settle); its API's ``Dialect``
(``app.apis``) says how its request is read, its key found and its errors answered, and
the request it reads says how its stream is written. This module only routes: the key is
presented, the body read and parsed, the completion opened and relayed to the socket.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from app.apis.chat import CHAT
from app.apis.dialect import Dialect, ErrorShape, Headers, openai_error, routes
from app.apis.messages import MESSAGES
from app.apis.responses import RESPONSES
from app.completion.request import Identify, stream_limits
from app.core import tracing
from app.core.errors import ApiError, ClientDisconnected, ErrorKind
from app.core.metrics import METRICS
from app.credits import ceilings, idempotency
from app.credits.ceilings import requested_ceiling
from app.credits.outcomes import Replay
from app.http.errors import CLIENT_CLOSED_REQUEST, as_api_error
from app.http.headers import SECURITY_HEADERS

if TYPE_CHECKING:
    from prometheus_client import Histogram

    from app.completion.completion import Completion
    from app.runtime import Services

log = logging.getLogger("svc.http")
SSE_HEADERS = [
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
    *SECURITY_HEADERS,
]
UNREADABLE_HEADER = "\ufffd"
WriteBody = Callable[[bytes], Awaitable[None]]


class StreamExchange(Protocol):
    """One request to a streaming endpoint and its one response, as the server hands them
    over (``app.http.rsgi.exchange.RSGIExchange`` over granian)."""

    @property
    def method(self) -> str: ...

    closed: tuple[type[BaseException], ...]
    """What a write to a client that has gone raises."""

    def header(self, name: str) -> str | None:
        """A request header's value (``name`` in lower case), or None; a value sent in
        bytes other than visible ASCII is ``UNREADABLE_HEADER``, which no header's check
        accepts (a malformed ceiling or Idempotency-Key is refused, not ignored)."""
        ...

    def single_header(self, name: str, shown: str) -> str | None:
        """``header``, for a header a request may send once: ``repeated_header``'s 400
        naming it as ``shown`` when it came more than once (else the first would win)."""
        ...

    def address(self, services: Services) -> str:
        """The client's address, as the failed-auth throttle counts it."""
        ...

    async def body(self, limit: int) -> bytes:
        """The request body: ``ApiError`` (413) past ``limit`` bytes, without reading it
        all; ``ClientDisconnected`` when the client leaves before sending it all."""
        ...

    def answer(self, status: int, headers: Headers, body: bytes) -> None:
        """The whole response at once."""
        ...

    def stream(self, headers: Headers) -> WriteBody:
        """Start a 200 response whose body is written piece by piece with the function
        returned; the body ends when the last reference to that function is dropped (the
        exchange keeps none)."""
        ...

    def watch_disconnect(self, left: Callable[[], object]) -> Callable[[], object]:
        """Call ``left`` once the client has gone, from the event loop, never before the
        caller's next suspension; returns what stops the watch. No task of its own: the
        server's own future is watched where it has one (granian's)."""
        ...


def send_error(
    exchange: StreamExchange, error: ApiError, rid: str, shape: ErrorShape = openai_error
) -> None:
    answer = shape(error, rid)
    headers = [
        *answer.headers,
        ("content-length", str(len(answer.body))),
        ("x-request-id", rid),
        *SECURITY_HEADERS,
    ]
    exchange.answer(error.status, headers, answer.body)


def _identify(services: Services, pid: str) -> Identify:
    """The ``safety_identifier`` of account ``pid``'s request, given the client's own."""
    return functools.partial(services.safety_identifiers.of, pid)


STREAMS = (CHAT, RESPONSES, MESSAGES)
STREAM_ROUTES = routes(*STREAMS)
"""The paths the RSGI gateway serves the streams on (same handler, same request id, same
metric series with or without a trailing slash)."""


class _Opening:
    """What is known of a request while it opens: its alias, once its body is read (the
    label its refusal is counted under; "" before)."""

    __slots__ = ("model",)

    def __init__(self) -> None:
        self.model = ""


async def _open(
    api: Dialect, services: Services, exchange: StreamExchange, opening: _Opening
) -> Completion | Replay:
    if exchange.method != "POST":
        raise ApiError(ErrorKind.METHOD_NOT_ALLOWED, f"Use POST for {api.path}.")
    idempotency_key = exchange.single_header(idempotency.HEADER, idempotency.SHOWN)
    ceiling = requested_ceiling(exchange.single_header(ceilings.HEADER, ceilings.HEADER))
    credentials = api.credentials(exchange.header)
    async with services.auth.presented(credentials, exchange.address(services)) as key:
        # the body is read once the key is known: a bad key is refused unread
        body = await exchange.body(services.settings.max_body_bytes)
        request = api.parse(
            body,
            services.aliases,
            identify=_identify(services, key.ident.pid),
            **stream_limits(services.settings),
        )
        opening.model = request.alias.id
        claim = None
        if idempotency_key is not None:
            claim = services.idempotency_records.claim_for(
                key.ident.pid, idempotency_key, api.path, body, environment=key.ident.environment
            )
        return await services.completions.open_presented(key, request, claim, ceiling=ceiling)


class _Body:
    """The response body the relay writes, and its time to first byte (observed once, on
    the first write: the rest of the writes test one flag).

    A streamed body has no end marker: it ends when its writer is let go of. This is the
    writer's one owner, and drops it after the last write, or in ``end`` when the relay
    stopped early, so no reference left in a traceback keeps the client waiting for more."""

    __slots__ = ("_closed", "_started", "_ttfb", "_write", "_written")

    def __init__(
        self, write: WriteBody, closed: type[BaseException], ttfb: Histogram, started: float
    ) -> None:
        self._write: WriteBody | None = write
        self._closed = closed
        self._ttfb = ttfb
        self._started = started
        self._written = False

    def send(self, data: bytes, more: bool = True) -> Awaitable[None]:
        """Write ``data``; the caller awaits the server's own awaitable (a plain function,
        not a coroutine: no coroutine object per chunk)."""
        write = self._write
        if write is None:
            raise self._closed("the response body has ended")
        if not self._written:
            self._written = True
            self._ttfb.observe(time.perf_counter() - self._started)
        if not more:
            self._write = None
        return write(data)

    def end(self) -> None:
        self._write = None


def _send_replay(exchange: StreamExchange, body: bytes, rid: str) -> None:
    """The recorded stream of an Idempotency-Key's first request, sent again whole."""
    headers = [
        *SSE_HEADERS,
        ("content-length", str(len(body))),
        ("x-request-id", rid),
        ("idempotent-replayed", "true"),
    ]
    exchange.answer(200, headers, body)


async def serve_stream(
    api: Dialect, services: Services, exchange: StreamExchange, rid: str
) -> None:
    """Reserve, stream, settle. Errors before the first byte are plain JSON responses.

    With traces on (``app.core.tracing``) the request is a span, which continues the
    client's trace (``traceparent``); traces off, all it costs is the one check here."""
    traces = tracing.ACTIVE
    if traces is None:
        await _serve(api, services, exchange, rid)
        return
    with traces.request(
        exchange.header, method=exchange.method, route=api.path, request_id=rid
    ) as span:
        span.answered(*await _serve(api, services, exchange, rid))


async def _serve(
    api: Dialect, services: Services, exchange: StreamExchange, rid: str
) -> tuple[int, str]:
    """Serve the request; the status answered, and the error code answered with ("": a
    stream, or a replay)."""
    started = time.perf_counter()
    opening = _Opening()
    try:
        opened = await _open(api, services, exchange, opening)
    except ClientDisconnected:
        # Clients do this (a timeout, a cancelled upload): nothing was reserved, nobody
        # is left to answer, and it is no server error.
        log.info("client disconnected before sending the whole request body")
        METRICS.request_done(api.path, CLIENT_CLOSED_REQUEST, "", time.perf_counter() - started)
        return CLIENT_CLOSED_REQUEST, "client_disconnect"
    except Exception as exc:
        error = as_api_error(exc)
        send_error(exchange, error, rid, api.error_shape)
        METRICS.labelled(METRICS.rejections, error.kind.code).inc()
        METRICS.request_done(api.path, error.status, opening.model, time.perf_counter() - started)
        return error.status, error.kind.code
    if isinstance(opened, Replay):
        _send_replay(exchange, opened.body, rid)
        METRICS.request_done(api.path, 200, opening.model, time.perf_counter() - started)
        return 200, ""

    completion = opened
    metrics = METRICS.stream(api.path, completion.params.alias.id)
    closed = exchange.closed
    # the writer goes straight to its one owner: a reference kept here would hold the body open
    headers = [*SSE_HEADERS, ("x-request-id", rid), *completion.params.headers]
    body = _Body(exchange.stream(headers), closed[0], metrics.ttfb, started)
    METRICS.open_streams.inc()
    # The relay runs in this handler's task and the client's departure is a callback, so a
    # stream costs the server's one task (issue 53). The callback cannot come before the
    # relay's first suspension, by which time its Relay exists (Completion.client_left).
    # It is no cancellation: the relay may still read the usage report.
    stop_watching = None
    if completion.stops_when_client_leaves:
        stop_watching = exchange.watch_disconnect(completion.client_left)
    try:
        await completion.relay(body.send)  # its last write ended the response
    except asyncio.CancelledError:
        pass  # this handler was cancelled: the relay settles in its own shielded task
    except closed:
        # The client went away as the ending was written (the relay settled first). A
        # relay whose client left earlier returns: it read on for the usage report (within
        # its bound) and settled what that report says.
        pass
    finally:
        body.end()
        if stop_watching is not None:
            stop_watching()
        METRICS.open_streams.dec()
        metrics.done(time.perf_counter() - started)
    return 200, ""
