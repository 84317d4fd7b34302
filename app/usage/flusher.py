"""The flusher: usage events from Redis streams into durable daily rollups, exactly once.

Every settle appends one event to its shard's stream; a script that finds an account's
earned pool expired appends an expiry event there too (written to ``credit_expiries``).
Each usage event is also one request's row of activity (``activity``); until it is
written, the request's receipt is read from the stream (``app.usage.receipts``).
Each worker runs a flusher; a lease per shard (``SET NX PX``, taken over once it lapses)
lets one of them drain a shard at a time. A batch is the events after the shard's durable
cursor; it is aggregated into rollups per (account, key, day, alias, environment, API) and
written, with its expiries, in one database transaction together with the new cursor, and
only if the cursor is still the one the batch started from (two drainers racing after a
lapsed lease cannot both apply). Only then are the entries trimmed from the stream, so a
crash at any point replays at most what is already at or below the cursor, which is
skipped.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from collections.abc import Callable, Sequence

import msgspec
from redis.exceptions import WatchError

from app.core.clock import DAY_S
from app.core.errors import StoreError
from app.core.metrics import METRICS
from app.kv.client import REDIS_ERRORS, RedisClient
from app.kv.layout import KeySpace, as_text
from app.kv.stream_events import (
    CapEvent,
    ExpiryEvent,
    LowBalanceEvent,
    StreamEvent,
    UsageEvent,
    parse_event,
)
from app.store import (
    ActivityRecord,
    CreditExpiry,
    Store,
    UsageRollup,
    WebhookEventRecord,
    stream_id_key,
)
from app.usage.upstream_costs import upstream_costs
from app.webhooks.events import cap_threshold, credits_low, earned_expired

log = logging.getLogger("svc.flusher")

PRUNE_EVERY_S = 60.0  # how often a worker tries to prune old activity (jittered)
PRUNE_LEASE_MS = 50_000  # one worker prunes per round; no one releases it early
PRUNE_BATCH = 5_000  # activity rows deleted per transaction
PRUNE_BATCHES_PER_ROUND = 20


class Lag(msgspec.Struct):
    """How far the durable rollups are behind Redis."""

    pending_events: int  # entries still in the streams (flushed ones are trimmed)
    oldest_event_age_s: float  # age of the oldest entry, 0 when none


def aggregate(events: Sequence[StreamEvent]) -> list[UsageRollup]:
    """Sum the usage events per (account, key, day, alias, environment, API), in
    first-seen order; expiry events are not usage and are left out."""
    sums: dict[tuple[str, str, str, str, str, str], list[int]] = {}
    for e in events:
        if not isinstance(e, UsageEvent):
            continue
        key = (e.account_pid, e.kid, e.day, e.alias, e.environment, e.api)
        acc = sums.setdefault(key, [0, 0, 0, 0, 0])
        acc[0] += 1
        acc[1] += e.prompt_tokens
        acc[2] += e.completion_tokens
        acc[3] += e.credits
        acc[4] += e.earned_credits
    return [
        UsageRollup(
            account_pid=pid,
            kid=kid,
            day=day,
            alias=alias,
            environment=env,
            api=api,
            requests=n,
            prompt_tokens=pt,
            completion_tokens=ct,
            credits=cr,
            earned_credits=ec,
        )
        for (pid, kid, day, alias, env, api), (n, pt, ct, cr, ec) in sums.items()
    ]


def expiries(shard: int, events: Sequence[StreamEvent]) -> list[CreditExpiry]:
    """The expiry events as durable rows, each keyed by its shard and stream id."""
    return [
        CreditExpiry(
            expiry_id=f"{shard}:{e.id}",
            account_pid=e.account_pid,
            credits=e.credits,
            expired_at=e.ts,
        )
        for e in events
        if isinstance(e, ExpiryEvent)
    ]


def activity_row(shard: int, e: UsageEvent) -> ActivityRecord:
    """A usage event as its activity row, keyed by its shard and stream id. A request whose
    response id is unknown (swept: its worker stopped before settling) is named by its
    reservation; one whose start is unknown (an event from before the field) by its settle
    time. Its failovers are not known when nothing served is (swept: its worker stopped
    before it could tell), nor the prices it was settled at."""
    prices = e.served.prices
    return ActivityRecord(
        event_key=f"{shard}:{e.id}",
        account_pid=e.account_pid,
        environment=e.environment,
        created=e.served.created or e.ts,
        id=e.served.response_id or e.reservation_id,
        kid=e.kid,
        requested_model=e.requested or e.alias,
        model=e.alias,
        api=e.api,
        prompt_tokens=e.prompt_tokens,
        completion_tokens=e.completion_tokens,
        credits_used=e.credits,
        outcome=e.outcome,
        ttfb_ms=e.served.ttfb_ms,
        duration_ms=e.served.duration_ms,
        usage_source=e.served.usage_source,
        earned_credits=e.earned_credits,
        cached_tokens=e.cached_tokens,
        cache_write_tokens=e.cache_write_tokens,
        reasoning_tokens=e.reasoning_tokens,
        failovers=e.failovers if e.served.response_id else None,
        input_price=None if prices is None else prices.input,
        cached_input_price=None if prices is None else prices.cached_input,
        cache_write_price=None if prices is None else prices.cache_write,
        output_price=None if prices is None else prices.output,
        provider=e.served.provider or None,
        upstream_model=e.served.upstream_model if e.served.provider else None,
        cost_currency=e.served.cost_currency or None,
        upstream_cost_micros=e.served.upstream_cost if e.served.cost_currency else None,
    )


def activity(shard: int, events: Sequence[StreamEvent]) -> list[ActivityRecord]:
    """The usage events as activity rows (``activity_row``)."""
    return [activity_row(shard, e) for e in events if isinstance(e, UsageEvent)]


def notices(shard: int, events: Sequence[StreamEvent]) -> list[WebhookEventRecord]:
    """The events webhooks are told of: expiries (``credits.earned_expired``), a balance
    fallen below its threshold (``credits.low``), a cap threshold crossed."""
    told = []
    for e in events:
        at = f"{shard}:{e.id}"
        if isinstance(e, ExpiryEvent):
            told.append(earned_expired(e.account_pid, at, e.credits, e.ts))
        elif isinstance(e, LowBalanceEvent):
            told.append(credits_low(e.account_pid, at, e.balance, e.low, e.ts))
        elif isinstance(e, CapEvent):
            told.append(
                cap_threshold(e.account_pid, e.kid, e.counter, e.level, e.cap, e.spent, e.ts)
            )
    return told


def next_stream_id(stream_id: str) -> str:
    """The smallest stream id after ``stream_id`` (for ``XTRIM MINID``)."""
    ms, seq = stream_id_key(stream_id)
    return f"{ms}-{seq + 1}"


class Flusher:
    """Drains the usage streams of every shard into the durable store."""

    def __init__(
        self,
        redis: RedisClient,
        layout: KeySpace,
        store: Store,
        *,
        interval_s: float = 1.0,
        batch_size: int = 1000,
        lease_s: float = 10.0,
        activity_days: int = 30,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``activity_days``: how long activity rows are kept (``prune_activity``)."""
        self.redis = redis
        self.layout = layout
        self.store = store
        self.interval_s = interval_s
        self.batch_size = batch_size
        self.lease_ms = int(lease_s * 1000)
        self.clock = clock
        self.activity_s = activity_days * DAY_S
        self._next_prune = 0.0  # monotonic time of this process's next pruning round
        self.token = secrets.token_hex(8)
        self._leased: set[int] = set()  # shards whose lease this process took
        self.applied = 0  # events this process wrote to the store

    async def _hold_lease(self, shard: int) -> bool:
        if await self._lease(self.layout.flush_lease(shard), self.lease_ms):
            self._leased.add(shard)
            return True
        return False

    async def _lease(self, key: str, px: int) -> bool:
        """Take the lease at ``key`` for ``px`` ms, or renew it when this process holds it."""
        if await self.redis.set(key, self.token, nx=True, px=px):
            return True
        holder = await self.redis.get(key)
        if holder is not None and as_text(holder) == self.token:
            await self.redis.pexpire(key, px)
            return True
        return False

    async def events_after(self, shard: int, cursor: str | None, count: int) -> list[StreamEvent]:
        """Up to ``count`` events of the shard with ids above ``cursor``, oldest first."""
        start = f"({cursor}" if cursor else "-"
        entries = await self.redis.xrange(self.layout.events(shard), start, "+", count=count)
        return [parse_event(entry_id, fields) for entry_id, fields in entries or []]

    async def flush_shard(self, shard: int) -> int:
        """Apply the shard's pending events, batch by batch, while this process holds the
        shard's lease; returns how many events it applied."""
        return (await self._drain(shard))[1]

    async def _drain(self, shard: int) -> tuple[bool, int]:
        """(whether this process got the shard's lease, events applied)."""
        applied = 0
        leased = False
        while await self._hold_lease(shard):
            leased = True
            cursor = await self.store.get_cursor(shard)
            events = await self.events_after(shard, cursor, self.batch_size)
            if events:
                last = events[-1].id
                if await self.store.apply_usage(
                    shard,
                    last,
                    aggregate(events),
                    after=cursor,
                    expiries=expiries(shard, events),
                    activity=activity(shard, events),
                    webhook_events=notices(shard, events),
                    costs=upstream_costs(events),
                ):
                    applied += len(events)
                    cursor = last
                    METRICS.flushes.inc()
                    METRICS.flushed_events.inc(len(events))
                else:
                    cursor = await self.store.get_cursor(shard)  # another drainer moved on
            if cursor:
                # everything at or below the durable cursor is in the store: drop it
                await self.redis.xtrim(self.layout.events(shard), minid=next_stream_id(cursor))
            if len(events) < self.batch_size:
                break
        self.applied += applied
        return leased, applied

    async def _busy_shards(self) -> list[int]:
        pipe = self.redis.pipeline(transaction=False)
        for shard in self.layout.all_shards():
            pipe.xlen(self.layout.events(shard))
        return [shard for shard, n in enumerate(await pipe.execute()) if int(n)]

    async def flush_all(self) -> int:
        """One pass over the shards that have events (in random order, so workers spread
        out); an idle pass is one pipelined round trip."""
        busy = await self._busy_shards()
        random.shuffle(busy)
        total = 0
        for shard in busy:
            total += await self.flush_shard(shard)
        return total

    async def final_flush(self, wait_s: float) -> int:
        """On shutdown, after this process's last settlement: drain every shard that has
        events, waiting up to ``wait_s`` for a shard another drainer holds (it lets go when
        it exits, or its lease lapses), then let go of this process's own leases so the
        next worker to exit need not wait for them."""
        deadline = time.monotonic() + wait_s
        pending = await self._busy_shards()
        total = 0
        try:
            while pending:
                waiting = []
                for shard in pending:
                    leased, applied = await self._drain(shard)
                    total += applied
                    if not leased:
                        waiting.append(shard)
                pending = waiting
                if pending and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                elif pending:
                    log.warning("shutdown: %d shards left to other drainers", len(pending))
                    break
        finally:
            await self.release_leases()
        return total

    async def release_leases(self) -> None:
        """Delete the leases this process still holds (only where it is still the holder)."""
        for shard in sorted(self._leased):
            key = self.layout.flush_lease(shard)
            async with self.redis.pipeline(transaction=True) as pipe:
                try:
                    await pipe.watch(key)
                    holder = await pipe.get(key)
                    if holder is not None and as_text(holder) == self.token:
                        pipe.multi()  # type: ignore[no-untyped-call]
                        pipe.delete(key)
                        await pipe.execute()
                except WatchError:
                    pass  # taken over meanwhile: not ours any more
        self._leased.clear()

    async def lag(self) -> Lag:
        """Unflushed events and the age of the oldest, over every shard (two round trips)."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in self.layout.all_shards():
            pipe.xlen(self.layout.events(shard))
        lengths = await pipe.execute()
        pipe = self.redis.pipeline(transaction=False)
        for shard in self.layout.all_shards():
            pipe.xrange(self.layout.events(shard), "-", "+", count=1)
        firsts = await pipe.execute()
        oldest_ms = min(
            (stream_id_key(as_text(entries[0][0]))[0] for entries in firsts if entries),
            default=None,
        )
        age = 0.0 if oldest_ms is None else max(0.0, self.clock() - oldest_ms / 1000)
        return Lag(pending_events=sum(int(n) for n in lengths), oldest_event_age_s=round(age, 3))

    async def prune_activity(self) -> int:
        """Delete the activity rows older than ``activity_days``, a batch per transaction
        (short ones: the flushers' writes go on between them), while this process holds
        the pruning lease; returns how many it deleted."""
        if not await self._lease(self.layout.activity_prune_lease(), PRUNE_LEASE_MS):
            return 0
        before = int(self.clock()) - self.activity_s
        deleted = 0
        for _ in range(PRUNE_BATCHES_PER_ROUND):  # the rest next round: the lease lapses
            batch = await self.store.prune_activity(before, PRUNE_BATCH)
            deleted += batch
            if batch < PRUNE_BATCH:
                break
        return deleted

    async def _maybe_prune(self) -> None:
        if time.monotonic() >= self._next_prune:
            self._next_prune = time.monotonic() + PRUNE_EVERY_S * random.uniform(0.5, 1.5)
            await self.prune_activity()

    async def run(self) -> None:
        """Flush every ``interval_s`` (jittered) until cancelled, pruning activity now and
        then; failures wait a round."""
        while True:
            await asyncio.sleep(self.interval_s * random.uniform(0.5, 1.5))
            try:
                await self.flush_all()
                await self._maybe_prune()
            except (*REDIS_ERRORS, StoreError, OSError) as exc:
                METRICS.labelled(METRICS.background_errors, "flusher").inc()
                log.warning("flush failed, retrying next round: %s", type(exc).__name__)
