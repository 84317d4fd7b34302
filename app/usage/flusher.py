"""The flusher: usage events from Redis streams into durable daily rollups, exactly once.

Every settle appends one event to its shard's stream (so do the scripts' expiry, low-balance
and cap events); each usage event is also a request's activity row (``batch_rows``), read
from the stream until it is written (``app.usage.receipts``). Each worker runs a flusher; a
lease per shard (``SET NX PX``, taken over once it lapses) lets one of them drain a shard at
a time. A batch is the events after the shard's durable cursor (read from the store, or as
this drainer's last batch left it while it held the lease); its rows are written with the
new cursor in one transaction (a pass's read-ahead batches of several shards in one), each
only if its cursor is still the one the batch was read after (two drainers racing after a
lapsed lease cannot both apply). Only then are the entries trimmed from the stream, so a
crash at any point replays at most what is at or below the cursor, which is skipped.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from collections.abc import Callable
from enum import Enum, auto
from typing import Any

import msgspec
from redis.exceptions import WatchError

from app.core.clock import DAY_S
from app.core.errors import StoreError
from app.core.metrics import METRICS
from app.kv.client import REDIS_ERRORS, RedisClient
from app.kv.layout import KeySpace, as_text
from app.kv.stream_events import StreamEvent
from app.store import Store, stream_id_key
from app.usage.batch_rows import parsed, usage_batch

log = logging.getLogger("svc.flusher")

PRUNE_EVERY_S = 60.0  # how often a worker tries to prune old activity (jittered)
PRUNE_LEASE_MS = 50_000  # one worker prunes per round; no one releases it early
PRUNE_BATCH = 5_000  # activity rows deleted per transaction
PRUNE_BATCHES_PER_ROUND = 20
READ_AHEAD_EVENTS = 1_000
"""About how many events a pass reads in one round trip, and holds at once (and keeps the
memory of: at 5,000, a worker's RSS stayed ~8 MB higher, at 1,000 ~4 MB)."""


def read_ahead_groups(shards: list[int], lengths: dict[int, int], bound: int) -> list[list[int]]:
    """``shards`` in turn, in groups whose streams hold ``bound`` entries at most together
    (by XLEN, ``lengths``; a group holds one shard at least)."""
    groups: list[list[int]] = []
    size = bound + 1
    for shard in shards:
        if size + lengths.get(shard, 0) > bound:
            groups.append([])
            size = 0
        groups[-1].append(shard)
        size += lengths.get(shard, 0)
    return groups


class Held(Enum):
    """What asking for a lease found."""

    NO = auto()  # another process holds it
    TAKEN = auto()  # free (or lapsed): this process took it
    RENEWED = auto()  # this process held it: it lives ``px`` ms more


class Lag(msgspec.Struct):
    """How far the durable rollups are behind Redis."""

    pending_events: int  # entries still in the streams (flushed ones are trimmed)
    oldest_event_age_s: float  # age of the oldest entry, 0 when none


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
        # The durable cursor of each shard this process drains, as its last batch left it,
        # kept while it holds the shard's lease without a break (``_drain``).
        self._cursors: dict[int, str | None] = {}
        self.applied = 0  # events this process wrote to the store

    async def _hold_lease(self, shard: int) -> bool:
        """Whether this process holds the shard's lease (taken or renewed now); a cursor it
        carries is dropped unless the lease was renewed (held since its last batch)."""
        held = await self._lease_held(self.layout.flush_lease(shard), self.lease_ms)
        if held is not Held.RENEWED:
            self._cursors.pop(shard, None)
        if held is Held.NO:
            return False
        self._leased.add(shard)
        return True

    async def _lease(self, key: str, px: int) -> bool:
        """Take the lease at ``key`` for ``px`` ms, or renew it when this process holds it."""
        return await self._lease_held(key, px) is not Held.NO

    async def _lease_held(self, key: str, px: int) -> Held:
        # SET NX and the GET go out together: a lease held, by this process or another,
        # costs one round trip less than asking the second only when the first fails.
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(key, self.token, nx=True, px=px)
        pipe.get(key)
        taken, holder = await pipe.execute()
        if taken:
            return Held.TAKEN
        if holder is not None and as_text(holder) == self.token:
            # it may lapse between the GET and here: held as before, but not throughout
            return Held.RENEWED if await self.redis.pexpire(key, px) else Held.TAKEN
        return Held.NO

    async def events_after(self, shard: int, cursor: str | None, count: int) -> list[StreamEvent]:
        """Up to ``count`` events of the shard with ids above ``cursor``, oldest first."""
        start = f"({cursor}" if cursor else "-"
        entries = await self.redis.xrange(self.layout.events(shard), start, "+", count=count)
        return parsed(entries)

    async def _hold_leases(self, shards: list[int]) -> tuple[list[int], list[int]]:
        """``_hold_lease`` for several shards in two round trips (ask, renew): the ones held
        now, and of those the ones renewed with a carried cursor (``_read_ahead`` reads on)."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in shards:
            key = self.layout.flush_lease(shard)
            pipe.set(key, self.token, nx=True, px=self.lease_ms)
            pipe.get(key)
        replies = await pipe.execute()
        held, renewing = [], []
        for shard, taken, holder in zip(shards, replies[::2], replies[1::2], strict=True):
            ours = holder is not None and as_text(holder) == self.token
            if taken or ours:
                held.append(shard)
            if ours and not taken:
                renewing.append(shard)
            else:
                self._cursors.pop(shard, None)  # not held throughout: read again
        self._leased.update(held)
        if not renewing:
            return held, []
        pipe = self.redis.pipeline(transaction=False)
        for shard in renewing:
            pipe.pexpire(self.layout.flush_lease(shard), self.lease_ms)
        for shard, renewed in zip(renewing, await pipe.execute(), strict=True):
            if not renewed:  # lapsed after the GET: held as before, but not throughout
                self._cursors.pop(shard, None)
        return held, [shard for shard in renewing if shard in self._cursors]

    async def _read_ahead(self, shards: list[int]) -> dict[int, Any]:
        """Each shard's first batch after its carried cursor (XRANGE's reply): one trip."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in shards:
            cursor = self._cursors[shard]
            start = f"({cursor}" if cursor else "-"
            pipe.xrange(self.layout.events(shard), start, "+", count=self.batch_size)
        return dict(zip(shards, await pipe.execute(), strict=True))

    async def flush_shard(self, shard: int) -> int:
        """Apply the shard's pending events, batch by batch, while this process holds the
        shard's lease; returns how many events it applied."""
        return (await self._drain(shard))[1]

    async def _drain(
        self,
        shard: int,
        *,
        held: bool = False,
        trims: dict[int, str] | None = None,
    ) -> tuple[bool, int]:
        """(whether this process got the shard's lease, events applied). ``held``: the
        lease was just asked for (``_hold_leases``); ``trims``: where the stream's last trim
        goes (shard -> cursor), for the pass to send with the other shards'."""
        applied = 0
        leased = False
        while held or await self._hold_lease(shard):
            held = False
            leased = True
            # The cursor this process's last batch left saves a store call per batch. One
            # that finds nothing after it (the pass saw entries), or whose batch is refused
            # (another drainer moved the cursor, in a lapse of the lease too short to
            # notice), is read from the store again. Taken out while the batch runs.
            carried = shard in self._cursors
            cursor = self._cursors.pop(shard) if carried else await self.store.get_cursor(shard)
            # a batch shorter than it was asked for leaves nothing after it
            events = await self.events_after(shard, cursor, self.batch_size)
            if carried and not events and not applied:
                continue
            if events:
                last = events[-1].id
                if (await self.store.apply_usage_batches([usage_batch(shard, events, cursor)]))[0]:
                    applied += len(events)
                    cursor = last
                    METRICS.flushes.inc()
                    METRICS.flushed_events.inc(len(events))
                elif carried:
                    continue
                else:
                    cursor = await self.store.get_cursor(shard)  # another drainer moved on
            if cursor and trims is not None and len(events) < self.batch_size:
                trims[shard] = cursor
            elif cursor:
                await self._trim({shard: cursor})
            self._cursors[shard] = cursor
            if len(events) < self.batch_size:
                break
        self.applied += applied
        return leased, applied

    async def _busy_shards(self) -> dict[int, int]:
        """The shards whose stream has entries, and how many."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in self.layout.all_shards():
            pipe.xlen(self.layout.events(shard))
        return {shard: int(n) for shard, n in enumerate(await pipe.execute()) if int(n)}

    async def flush_all(self) -> int:
        """One pass over the shards that have events (in random order, so workers spread
        out); an idle pass is one pipelined round trip."""
        busy = await self._busy_shards()
        if not busy:
            return 0
        order = list(busy)
        random.shuffle(order)
        held, carried = await self._hold_leases(order)
        total = 0
        trims: dict[int, str] = {}
        firsts_read = set(carried)
        for group in read_ahead_groups(carried, busy, READ_AHEAD_EVENTS):
            total += await self._apply_read_ahead(await self._read_ahead(group), trims)
        for shard in held:
            if shard not in firsts_read:
                total += (await self._drain(shard, held=True, trims=trims))[1]
        # The streams are trimmed to their cursors in one round trip at the end. A trim a
        # failure skips is made by the shard's next batch: a carried cursor that finds
        # nothing after it, though the stream has entries, is read again and trimmed to.
        if trims:
            await self._trim(trims)
        return total

    async def _apply_read_ahead(self, firsts: dict[int, Any], trims: dict[int, str]) -> int:
        """The first batches read ahead, applied in one store transaction; a shard whose
        batch was full, refused (another drainer moved its cursor) or empty (its stream
        holds only what is at or below the cursor) is drained on (``_drain``)."""
        batches, sizes, on = [], {}, []
        for shard, entries in firsts.items():
            events, cursor = parsed(entries), self._cursors.pop(shard)  # a failure carries none
            sizes[shard] = len(events)
            if events:
                batches.append(usage_batch(shard, events, cursor))
            else:
                on.append(shard)
        results = await self.store.apply_usage_batches(batches) if batches else []
        applied = [batch for batch, done in zip(batches, results, strict=True) if done]
        on += [batch.shard for batch, done in zip(batches, results, strict=True) if not done]
        for batch in applied:
            self._cursors[batch.shard] = trims[batch.shard] = batch.last_stream_id
            if sizes[batch.shard] >= self.batch_size:
                on.append(batch.shard)
        total = sum(sizes[batch.shard] for batch in applied)
        METRICS.flushes.inc(len(applied))
        METRICS.flushed_events.inc(total)
        self.applied += total
        for shard in on:
            total += (await self._drain(shard, trims=trims))[1]
        return total

    async def _trim(self, cursors: dict[int, str]) -> None:
        """Drop from each shard's stream what is at or below its durable cursor (it is in
        the store): one XTRIM, or one pipelined round trip for several."""
        if len(cursors) == 1:
            ((shard, cursor),) = cursors.items()
            await self.redis.xtrim(self.layout.events(shard), minid=next_stream_id(cursor))
            return
        pipe = self.redis.pipeline(transaction=False)
        for shard, cursor in cursors.items():
            pipe.xtrim(self.layout.events(shard), minid=next_stream_id(cursor))
        await pipe.execute()

    async def final_flush(self, wait_s: float) -> int:
        """On shutdown, after this process's last settlement: drain every shard that has
        events, waiting up to ``wait_s`` for a shard another drainer holds (it lets go when
        it exits, or its lease lapses), then let go of this process's own leases so the
        next worker to exit need not wait for them."""
        deadline = time.monotonic() + wait_s
        pending = list(await self._busy_shards())
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
        busy = await self._busy_shards()
        pipe = self.redis.pipeline(transaction=False)
        for shard in busy:
            pipe.xrange(self.layout.events(shard), "-", "+", count=1)
        firsts = await pipe.execute() if busy else []
        oldest_ms = min((stream_id_key(as_text(e[0][0]))[0] for e in firsts if e), default=None)
        age = 0.0 if oldest_ms is None else max(0.0, self.clock() - oldest_ms / 1000)
        return Lag(pending_events=sum(busy.values()), oldest_event_age_s=round(age, 3))

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
