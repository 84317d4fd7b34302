"""The RSGI app granian serves: the streaming APIs (``app.http.streams.STREAM_ROUTES``)
natively, everything else through Litestar.

Every HTTP request gets a request id (the client's ``x-request-id`` when it is a sane one,
else a new one): it is sent back in ``x-request-id`` and tags the request's logs.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from typing import cast

from litestar import Litestar

from app.core.logs import request_id
from app.core.metrics import METRICS
from app.http.rsgi.asgi_bridge import ASGIApp, ASGIRequest
from app.http.rsgi.exchange import RSGIExchange
from app.http.rsgi.lifespan import Lifespan, LifespanFailed
from app.http.rsgi.protocol import Headers, HTTPProtocol, Scope
from app.http.streams import STREAM_ROUTES, serve_stream

log = logging.getLogger("svc.serve")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def incoming_request_id(headers: Headers) -> str | None:
    """The client's ``x-request-id``, when it is short and plain enough to log and echo."""
    value = headers.get("x-request-id")
    return value if value is not None and _REQUEST_ID.fullmatch(value) else None


def new_request_id() -> str:
    return "req_" + secrets.token_hex(12)


class Gateway:
    """The streaming endpoints (``/v1/chat/completions``, ``/v1/responses``, trailing slash
    or not) are served right here over RSGI: a stream writes each chunk straight to
    granian, with no framework or adapter per chunk.
    Every other path goes to the Litestar app through the ASGI adapter, and its lifespan
    runs in granian's RSGI init and del hooks."""

    def __init__(self, app: Litestar) -> None:
        self.app = app
        # Litestar's signature names its own TypedDicts; the adapter hands it plain dicts
        # of the same shapes
        self._asgi = cast(ASGIApp, app)
        self._lifespan = Lifespan(self._asgi)

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self._lifespan.startup(loop)
        except LifespanFailed as exc:
            log.error("the worker cannot start: %s", _reason(exc), exc_info=exc)
            raise SystemExit(1) from None

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self._lifespan.shutdown(loop)
        except LifespanFailed as exc:
            log.error("the worker's shutdown failed: %s", _reason(exc), exc_info=exc)

    async def __rsgi__(self, scope: Scope, protocol: HTTPProtocol) -> None:
        rid = incoming_request_id(scope.headers) or new_request_id()
        token = request_id.set(rid)
        try:
            api = STREAM_ROUTES.get(scope.path)
            if api is not None:
                services = self.app.state.services
                await serve_stream(api, services, RSGIExchange(scope, protocol), rid)
            else:
                await self._routed(scope, protocol, rid)
        finally:
            request_id.reset(token)

    async def _routed(self, scope: Scope, protocol: HTTPProtocol, rid: str) -> None:
        started = time.perf_counter()
        request = ASGIRequest(scope, protocol, self._lifespan.state, [("x-request-id", rid)])
        try:
            await request.run(self._asgi)
        finally:
            # the route template, not the path: ids in paths would explode the label set
            route = request.scope.get("path_template") or "unmatched"
            METRICS.request_done(route, request.status, "", time.perf_counter() - started)


def _reason(failed: LifespanFailed) -> str:
    """The app's own exception, named, when there is one: out of the group that Litestar's
    lifespan (an anyio task group) wraps it in."""
    cause = failed.__cause__
    while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
        cause = cause.exceptions[0]
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(failed)
