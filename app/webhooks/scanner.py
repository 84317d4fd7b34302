"""Time's events: a key about to expire, earned credits about to expire or expired.

Nothing on a request's path sees these happen, so one worker at a time (the holder of a
lease in Redis) looks every ``SVC_WEBHOOK_SCAN_S`` at the accounts that have webhooks:

- ``key.expiring`` for each active key whose ``expires_at`` is within 7 days;
- ``credits.earned_expiring`` when the earned pool expires within 3 days;
- an earned pool past its expiry is zeroed (``expire_earned.lua``), which records the
  expiry as every script that meets it does; the flusher turns that record into
  ``credits.earned_expired`` (so an expiry a request met first is told the same way).

Each notice's id is derived from what it is about (the key and its expiry, the account
and its pool's expiry), so the scans that see it again queue nothing more. The same
worker then deletes the deliveries of events older than ``SVC_ACTIVITY_DAYS``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from collections.abc import Callable

from app.core.clock import DAY_S
from app.core.errors import StoreError
from app.core.metrics import METRICS
from app.credits.money import Money
from app.keys.format import public_id
from app.kv.client import REDIS_ERRORS, RedisClient
from app.kv.fields import earned_expired
from app.kv.layout import KeySpace
from app.store import KeyRecord, Store, WebhookEventRecord
from app.webhooks.events import (
    EARNED_EXPIRED,
    EARNED_EXPIRING,
    EARNED_EXPIRING_NOTICE_S,
    KEY_EXPIRING,
    KEY_EXPIRING_NOTICE_S,
    encode_data,
    event_id,
)
from app.webhooks.registry import Webhooks

log = logging.getLogger("svc.webhooks")
PRUNE_BATCH = 5_000  # deliveries deleted per transaction
PRUNE_BATCHES_PER_ROUND = 20


def expiring_keys(pid: str, keys: list[KeyRecord], now: int) -> list[WebhookEventRecord]:
    """``key.expiring`` for the active keys that expire within the notice."""
    return [
        WebhookEventRecord(
            event_id=event_id(KEY_EXPIRING, k.kid, k.expires_at),
            account_pid=pid,
            type=KEY_EXPIRING,
            created=now,
            data=encode_data(
                {
                    "key_id": public_id(k.kid),
                    "name": k.name,
                    "environment": k.environment,
                    "expires_at": k.expires_at,
                }
            ),
        )
        for k in keys
        if k.status == "active"
        and k.expires_at is not None
        and now < k.expires_at <= now + KEY_EXPIRING_NOTICE_S
    ]


def earned_expiring(pid: str, earned: int, expires_at: int, now: int) -> list[WebhookEventRecord]:
    """``credits.earned_expiring`` when a pool with credits expires within the notice."""
    if earned <= 0 or not now < expires_at <= now + EARNED_EXPIRING_NOTICE_S:
        return []
    return [
        WebhookEventRecord(
            event_id=event_id(EARNED_EXPIRING, pid, expires_at),
            account_pid=pid,
            type=EARNED_EXPIRING,
            created=now,
            data=encode_data({"credits": earned, "expires_at": expires_at}),
        )
    ]


class Scanner:
    """Looks for time's events, one worker at a time."""

    def __init__(
        self,
        store: Store,
        money: Money,
        webhooks: Webhooks,
        redis: RedisClient,
        layout: KeySpace,
        *,
        every_s: float = 60.0,
        keep_days: int = 30,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``keep_days``: how long deliveries are kept after their event (``prune``)."""
        self.store = store
        self.money = money
        self.webhooks = webhooks
        self.redis = redis
        self.layout = layout
        self.every_s = every_s
        self.keep_s = keep_days * DAY_S
        self.clock = clock
        self.token = secrets.token_hex(8)

    async def scan(self) -> int:
        """One look at every account with webhooks; how many deliveries it queued."""
        now = int(self.clock())
        events: list[WebhookEventRecord] = []
        for pid, types in (await self.store.webhook_subscriptions()).items():
            if KEY_EXPIRING in types:
                events += expiring_keys(pid, await self.store.list_keys(pid), now)
            if EARNED_EXPIRING in types or EARNED_EXPIRED in types:
                earned, expires_at = await self.money.earned_pool(pid)
                if earned_expired(expires_at, now):
                    await self.money.expire_earned(pid, now)
                elif EARNED_EXPIRING in types:
                    events += earned_expiring(pid, earned, expires_at, now)
        return await self.webhooks.emit(events)

    async def prune(self) -> int:
        """Delete the deliveries of events older than ``keep_days`` (long past their 24
        hours of retries), a batch per transaction; how many."""
        before = int(self.clock()) - self.keep_s
        deleted = 0
        for _ in range(PRUNE_BATCHES_PER_ROUND):  # the rest next round
            batch = await self.store.prune_deliveries(before, PRUNE_BATCH)
            deleted += batch
            if batch < PRUNE_BATCH:
                break
        return deleted

    async def _leased(self) -> bool:
        """This worker's turn: the lease lives a little less than a round."""
        px = max(1, int(self.every_s * 900))
        return bool(
            await self.redis.set(self.layout.webhook_scan_lease(), self.token, nx=True, px=px)
        )

    async def run(self) -> None:
        """Scan every ``every_s`` (jittered) while this worker holds the lease."""
        while True:
            await asyncio.sleep(self.every_s * random.uniform(0.5, 1.0))
            try:
                if await self._leased():
                    await self.scan()
                    await self.prune()
            except (*REDIS_ERRORS, StoreError, OSError) as exc:
                METRICS.background_errors.labels("webhooks").inc()
                log.warning("webhook scan failed, retrying next round: %s", type(exc).__name__)
