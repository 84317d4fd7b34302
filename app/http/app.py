"""The Litestar app factory: the routes the RSGI gateway does not serve itself, error
handling, and the lifespan that opens the services, runs the background tasks (sweeper,
ledger repair, flusher, webhooks) and, at shutdown, drains the settlements and closes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.datastructures import ResponseHeader
from litestar.plugins import PluginProtocol
from litestar.plugins.core import MsgspecDIPlugin

from app.completion.lifecycle import GracePeriod
from app.completion.settlement import drain_background
from app.core.errors import StoreError
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
from app.kv.client import REDIS_ERRORS
from app.runtime import open_services


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
        services = await open_services(settings, traces=True)
        app.state.services = services
        with contextlib.suppress(*REDIS_ERRORS, StoreError, OSError):
            await services.usage.start_epochs()  # a new or emptied Redis starts them
        grace = GracePeriod(settings.shutdown_grace_s)
        grace.install()  # SIGTERM: streams get the grace period, then are cut and settled
        tasks = [
            asyncio.create_task(services.sweeper.run()),
            asyncio.create_task(services.ledger_repair.run()),
            asyncio.create_task(services.flusher.run()),
            asyncio.create_task(services.deliverer.run()),
            asyncio.create_task(services.scanner.run()),
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
