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
from typing import NamedTuple

from app.core.clock import day_tag
from app.core.metrics import METRICS
from app.credits.holds import Holds
from app.credits.outcomes import NO_RATES, NO_TOKENS, Hold, ScriptStatus
from app.kv.client import REDIS_ERRORS
from app.kv.fields import ReservationField
from app.kv.layout import as_text

log = logging.getLogger("svc.sweeper")
SWEPT_FIELDS = [  # what the sweeper needs of a reservation
    ReservationField.ACCOUNT,
    ReservationField.KEY,
    ReservationField.DAY,
    ReservationField.AMOUNT,
    ReservationField.ENVIRONMENT,
    ReservationField.CAP_KEY,
    ReservationField.IDEMPOTENCY,
    ReservationField.ALIAS,  # for the metrics
]


class Expired(NamedTuple):
    """A reservation past its deadline, and the alias it was made for."""

    hold: Hold
    alias: str


class Sweeper:
    """Finds expired reservations shard by shard and settles them at zero cost."""

    def __init__(
        self,
        holds: Holds,
        *,
        interval_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.holds = holds
        self.interval_s = interval_s
        self.clock = clock

    async def sweep_once(self) -> int:
        """Refund every reservation past its deadline now; returns how many this call did."""
        now = self.clock()
        done = 0
        for hold, alias in await self._expired(now):
            settled = await self.holds.settle(
                hold,
                now=now,
                rates=NO_RATES,
                tokens=NO_TOKENS,
                outcome="swept",
                only_if_expired=True,
            )
            if settled.status is ScriptStatus.OK:
                done += 1
                # The hold goes back as refunded credits, so the audit identity
                # reserved = settled + refunded holds in the metrics after a worker died.
                METRICS.settled(
                    "swept", hold.environment, alias, used=settled.credits_used, held=hold.amount
                )
                METRICS.labelled(METRICS.swept_credits, hold.environment).inc(
                    hold.amount - settled.credits_used
                )
        METRICS.sweeps.inc()
        METRICS.swept.inc(done)
        return done

    async def expired_holds(self, now: float, limit: int = 100) -> list[Hold]:
        """Open reservations past their deadline, at most ``limit`` per shard (sweeper)."""
        return [expired.hold for expired in await self._expired(now, limit)]

    async def _expired(self, now: float, limit: int = 100) -> list[Expired]:
        """``expired_holds``, each with its alias (the metrics count the refund under it).

        Two round trips whatever the number of shards: the ids of every shard, then the
        reservations they name."""
        redis, layout = self.holds.redis, self.holds.layout
        shards = layout.all_shards()
        pipe = redis.pipeline(transaction=False)
        for shard in shards:
            pipe.zrangebyscore(layout.reservations(shard), "-inf", int(now), start=0, num=limit)
        found = [
            (shard, as_text(rid))
            for shard, rids in zip(shards, await pipe.execute(), strict=True)
            for rid in rids
        ]
        if not found:
            return []
        pipe = redis.pipeline(transaction=False)
        for shard, rid in found:
            pipe.hmget(layout.reservation(shard, rid), SWEPT_FIELDS)
        holds: list[Expired] = []
        orphans: list[tuple[int, str]] = []
        for (shard, rid), fields in zip(found, await pipe.execute(), strict=True):
            if fields[0] is None:
                # settled meanwhile (settle removed the id too), or its hash was lost (an
                # evicting Redis, a hand-deleted key): an id left behind would fill this
                # shard's page of expired ids forever and hide the ones behind it
                orphans.append((shard, rid))
                continue
            pid, kid, day, amount, environment = (as_text(f) for f in fields[:5])
            # a reservation names its cap counter (one without: its key's, that day)
            cap, idem, alias = fields[5:]
            cap_key = as_text(cap) if cap else layout.cap(shard, kid, day_tag(day))
            hold = Hold(
                rid=rid,
                shard=shard,
                pid=pid,
                kid=kid,
                day=day,
                amount=int(amount),
                out_tokens=0,
                balance=0,
                environment=environment,
                cap_key=cap_key,
                idempotency=None if idem is None else as_text(idem),
            )
            holds.append(Expired(hold, "" if alias is None else as_text(alias)))
        if orphans:
            await self._forget(orphans)
        return holds

    async def _forget(self, orphans: list[tuple[int, str]]) -> None:
        """Drop reservation ids whose hash is gone from their shard's deadline index (a
        no-op for one settle removed meanwhile)."""
        layout = self.holds.layout
        pipe = self.holds.redis.pipeline(transaction=False)
        for shard, rid in orphans:
            pipe.zrem(layout.reservations(shard), rid)
        await pipe.execute()

    async def run(self) -> None:
        """Sweep every ``interval_s`` (with jitter, so workers spread out) until cancelled."""
        while True:
            await asyncio.sleep(self.interval_s * random.uniform(0.5, 1.5))
            try:
                # the reserve script's give-up time is in Redis's clock: follow its drift
                await self.holds.sync_clock()
                swept = await self.sweep_once()
            except (*REDIS_ERRORS, OSError) as exc:
                METRICS.labelled(METRICS.background_errors, "sweeper").inc()
                log.warning("sweep failed, retrying next round: %s", type(exc).__name__)
                continue
            if swept:
                log.info("refunded %d reservations past their deadline", swept)
