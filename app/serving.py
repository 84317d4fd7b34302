"""A worker's services while it serves: opened, their background tasks running (sweeper,
ledger repair, flusher, webhook deliverer, scanner), the shutdown's grace period armed, and
at the end the settlements still running drained, what they recorded flushed, and the
services closed, in that order. The HTTP app's lifespan (``app.http.app``) only enters it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.completion.lifecycle import GracePeriod
from app.completion.settlement import drain_background
from app.core.errors import StoreError
from app.core.settings import Settings
from app.kv.client import REDIS_ERRORS
from app.runtime import Services, open_services


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Services]:
    """The worker's services, with its background tasks running until the block ends."""
    services = await open_services(settings, traces=True)
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
        yield services
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
