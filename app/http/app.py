"""The Litestar app factory: the routes the RSGI gateway does not serve itself, error
handling, and the lifespan, which serves for as long as the worker's services are up
(``app.serving``: opened, their background tasks run, drained and closed at shutdown)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.datastructures import ResponseHeader
from litestar.plugins import PluginProtocol
from litestar.plugins.core import MsgspecDIPlugin

from app.core.settings import Settings
from app.http.admin import AdminController
from app.http.api import V1Controller
from app.http.beside import beside_routes
from app.http.books import BooksController
from app.http.console import ConsoleController, root
from app.http.errors import handle_exception
from app.http.headers import SECURITY_HEADERS
from app.http.health import HealthController
from app.http.metrics import MetricsController
from app.http.openapi_document import openapi_config
from app.http.purchases import PurchasesController
from app.http.purchases_apple import ApplePurchasesController
from app.http.purchases_google import GooglePurchasesController
from app.http.spotlights import SpotlightController
from app.http.streams import STREAMS
from app.serving import serving


class _App(Litestar):
    """Litestar without the plugins it adds for pydantic and attrs when they are installed:
    svc's routes take and give msgspec Structs only. pydantic's plugin costs about 8 MB of
    RSS per worker (pydantic and pydantic-core imported, bench/CHANGELOG.md, issue 53) where
    a test client installed it, attrs' about 1 MB (cattrs, Apple's library, installs it)."""

    @staticmethod
    def _get_default_plugins(plugins: list[PluginProtocol]) -> list[PluginProtocol]:
        plugins.append(MsgspecDIPlugin())
        return plugins


def create_app(settings: Settings) -> Litestar:
    """A Litestar app for resolved settings (``app.ops.resolve``): every route but the
    streams, which the RSGI gateway (``app.http.rsgi.gateway.Gateway``) serves itself."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with serving(settings) as services:
            app.state.services = services
            yield

    return _App(
        route_handlers=[
            V1Controller,
            *beside_routes(STREAMS),
            SpotlightController,
            PurchasesController,
            GooglePurchasesController,
            ApplePurchasesController,
            AdminController,
            BooksController,
            HealthController,
            MetricsController,
            ConsoleController,
            root,
        ],
        response_headers=[ResponseHeader(name=k, value=v) for k, v in SECURITY_HEADERS],
        lifespan=[lifespan],
        exception_handlers={Exception: handle_exception},
        request_max_body_size=settings.max_body_bytes,
        openapi_config=openapi_config(),
        debug=False,
        logging_config=None,  # logging is svc's own: JSON lines (app.core.logs)
    )
