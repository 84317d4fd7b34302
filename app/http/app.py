"""The app factory: routes, error handling, and the lifespan that owns the clients."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.datastructures import ResponseHeader
from litestar.enums import ScopeType
from litestar.types import Message, Receive, Scope, Send

from app.chat.completion import drain_background
from app.chat.lifecycle import GracePeriod
from app.core.logs import request_id
from app.core.metrics import METRICS
from app.core.settings import Settings
from app.http.admin import AdminController
from app.http.api import V1Controller
from app.http.chat import CHAT_PATHS, incoming_request_id, new_request_id, serve_chat
from app.http.errors import handle_exception
from app.http.headers import SECURITY_HEADERS
from app.http.health import HealthController
from app.http.metrics import MetricsController
from app.http.openapi import openapi_config
from app.kv.client import REDIS_ERRORS
from app.runtime import open_services
from app.store import StoreError


def create_app(settings: Settings) -> Litestar:
    """A Litestar app for resolved settings (``runtime.resolve``): every route but chat
    completions, which ``Gateway`` serves."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        services = await open_services(settings)
        app.state.services = services
        with contextlib.suppress(*REDIS_ERRORS, StoreError, OSError):
            await services.usage.epoch()  # a new or emptied Redis starts its usage epoch
        grace = GracePeriod(settings.shutdown_grace_s)
        grace.install()  # SIGTERM: streams get the grace period, then are cut and settled
        tasks = [
            asyncio.create_task(services.sweeper.run()),
            asyncio.create_task(services.flusher.run()),
        ]
        try:
            yield
        finally:
            grace.uninstall()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await drain_background()  # settlements still running finish first
            with contextlib.suppress(*REDIS_ERRORS, StoreError, OSError):
                # what they recorded goes out now
                await services.flusher.final_flush(settings.flush_lease_s)
            await services.close()

    return Litestar(
        route_handlers=[
            V1Controller,
            AdminController,
            HealthController,
            MetricsController,
        ],
        response_headers=[ResponseHeader(name=k, value=v) for k, v in SECURITY_HEADERS],
        lifespan=[lifespan],
        exception_handlers={Exception: handle_exception},
        request_max_body_size=settings.max_body_bytes,
        openapi_config=openapi_config(),
        debug=False,
        logging_config=None,  # logging is svc's own: JSON lines (app.core.logs)
    )


class Gateway:
    """The ASGI app granian serves: ``/v1/chat/completions`` (trailing slash or not) goes
    straight to its handler (Litestar's exception middleware would otherwise wrap every
    chunk's ``send``); everything else, lifespan included, goes to the Litestar app.

    Every HTTP request gets a request id (the client's ``x-request-id`` when it is a sane
    one, else a new one): it is sent back in ``x-request-id`` and tags the request's logs."""

    def __init__(self, app: Litestar) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        rid = incoming_request_id(scope) or new_request_id()
        token = request_id.set(rid)
        try:
            if scope["path"] in CHAT_PATHS:
                await serve_chat(self.app.state.services, scope, receive, send, rid)
            else:
                await self._routed(scope, receive, send, rid)
        finally:
            request_id.reset(token)

    async def _routed(self, scope: Scope, receive: Receive, send: Send, rid: str) -> None:
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            # the route template, not the path: ids in paths would explode the label set
            route = scope.get("path_template") or "unmatched"
            METRICS.request_done(route, status, "", time.perf_counter() - started)
