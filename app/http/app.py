"""The app factory: routes, error handling, and the lifespan that owns the clients."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.openapi import OpenAPIConfig

from app import __version__
from app.completions import drain_background
from app.http.admin import AdminController
from app.http.api import V1Controller
from app.http.chat import chat_completions
from app.http.errors import handle_exception
from app.runtime import open_services
from app.settings import Settings


def create_app(settings: Settings) -> Litestar:
    """A Litestar app for resolved settings (``runtime.resolve``)."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        services = await open_services(settings)
        app.state.services = services
        try:
            yield
        finally:
            await drain_background()
            await services.close()

    return Litestar(
        route_handlers=[V1Controller, AdminController, chat_completions],
        lifespan=[lifespan],
        exception_handlers={Exception: handle_exception},
        request_max_body_size=settings.max_body_bytes,
        openapi_config=OpenAPIConfig(title="svc", version=__version__),
        debug=False,
    )
