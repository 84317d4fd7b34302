"""The app factory: routes, error handling, and the lifespan that owns the clients."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.datastructures import ResponseHeader
from litestar.enums import ScopeType
from litestar.openapi import OpenAPIConfig
from litestar.types import Receive, Scope, Send
from redis.exceptions import RedisError

from app import __version__
from app.completions import drain_background
from app.http.admin import AdminController
from app.http.api import V1Controller
from app.http.chat import CHAT_PATH, chat_completions, serve_chat
from app.http.errors import handle_exception
from app.http.headers import SECURITY_HEADERS
from app.http.health import HealthController
from app.lifecycle import GracePeriod
from app.runtime import open_services
from app.settings import Settings
from app.store import StoreError


def create_app(settings: Settings) -> Litestar:
    """A Litestar app for resolved settings (``runtime.resolve``)."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        services = await open_services(settings)
        app.state.services = services
        with contextlib.suppress(RedisError, StoreError, OSError):
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
            with contextlib.suppress(RedisError, StoreError, OSError):
                # what they recorded goes out now
                await services.flusher.final_flush(settings.flush_lease_s)
            await services.close()

    return Litestar(
        route_handlers=[V1Controller, AdminController, HealthController, chat_completions],
        response_headers=[ResponseHeader(name=k, value=v) for k, v in SECURITY_HEADERS],
        lifespan=[lifespan],
        exception_handlers={Exception: handle_exception},
        request_max_body_size=settings.max_body_bytes,
        openapi_config=OpenAPIConfig(title="svc", version=__version__),
        debug=False,
    )


class Gateway:
    """The ASGI app granian serves: ``POST /v1/chat/completions`` goes straight to its
    handler (Litestar's exception middleware would otherwise wrap every chunk's ``send``);
    everything else, lifespan included, goes to the Litestar app."""

    def __init__(self, app: Litestar) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP and scope["path"] == CHAT_PATH:
            await serve_chat(self.app.state.services, scope, receive, send)
        else:
            await self.app(scope, receive, send)
