"""The sweeper: refunds reservations whose worker died (crash, SIGKILL) before settling.

A live stream keeps pushing its reservation's deadline forward (the relay's heartbeat), so
a reservation past its deadline belongs to a request nobody will settle. Every worker runs
a sweeper; they may race for the same reservation, and that is safe: the settle script
closes a reservation once and answers NOT_FOUND to whoever comes second.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from app.core.metrics import METRICS
from app.credits.ledger import RedisLedger
from app.credits.outcomes import ScriptStatus
from app.kv.client import REDIS_ERRORS

log = logging.getLogger("svc.sweeper")


class Sweeper:
    """Finds expired reservations shard by shard and settles them at zero cost."""

    def __init__(
        self,
        ledger: RedisLedger,
        *,
        interval_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger = ledger
        self.interval_s = interval_s
        self.clock = clock

    async def sweep_once(self) -> int:
        """Refund every reservation past its deadline now; returns how many this call did."""
        now = self.clock()
        done = 0
        for hold in await self.ledger.expired_holds(now):
            settled = await self.ledger.settle(
                hold,
                now=now,
                credits_used=0,
                prompt_tokens=0,
                completion_tokens=0,
                outcome="swept",
                only_if_expired=True,
            )
            if settled.status is ScriptStatus.OK:
                done += 1
                # The hold goes back as refunded credits, so the audit identity
                # reserved = settled + refunded holds in the metrics after a worker died.
                METRICS.settled(
                    "swept", hold.environment, used=settled.credits_used, held=hold.amount
                )
        METRICS.sweeps.inc()
        METRICS.swept.inc(done)
        return done

    async def run(self) -> None:
        """Sweep every ``interval_s`` (with jitter, so workers spread out) until cancelled."""
        while True:
            await asyncio.sleep(self.interval_s * random.uniform(0.5, 1.5))
            try:
                # the reserve script's give-up time is in Redis's clock: follow its drift
                await self.ledger.sync_clock()
                swept = await self.sweep_once()
            except (*REDIS_ERRORS, OSError) as exc:
                METRICS.background_errors.labels("sweeper").inc()
                log.warning("sweep failed, retrying next round: %s", type(exc).__name__)
                continue
            if swept:
                log.info("refunded %d reservations past their deadline", swept)
