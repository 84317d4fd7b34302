"""Each shard's Redis state next to its accounts' durable ledger, read at one instant.

What ``svc admin reconcile`` compares and ``svc admin rebuild-redis`` restores from: the
balance pools and the accounts' statuses, the open reservations' holds, the usage counters
(all-time and per day) and the events after the flush cursor of every shard, with the
durable sums (and statuses) of the same accounts, race-free with a running flusher (see
``consistent_shards``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from app.core.clock import day_tag
from app.core.errors import service_unavailable
from app.kv.client import RedisClient
from app.kv.fields import (
    ACCOUNT_ACTIVE,
    COUNTERS,
    GROUP_COUNTERS,
    GROUP_KEY,
    GROUP_MODEL,
    AccountField,
    ReservationField,
    UsageCounters,
    account_status,
    group_field,
    group_values,
    usage_field,
)
from app.kv.layout import KeySpace, as_text
from app.kv.stream_events import ExpiryEvent, StreamEvent, UsageEvent, parse_event
from app.store import END_OF_TIME, LedgerSnapshot, Store

MAX_ROUNDS = 20  # durable snapshots before giving up on a flusher that keeps moving
MAX_READS = 50  # reads of one shard before giving up on reservations that keep changing


class ShardRead(msgspec.Struct):
    """One instant of one shard in Redis."""

    pools: dict[str, tuple[int, int]]  # pid -> (earned, purchased); absent: no hash
    held: dict[str, tuple[int, int]]  # pid -> (earned, purchased) held, live reservations
    usage: dict[str, dict[str, int]]  # pid -> usage_field -> all-time value
    days: dict[str, dict[str, dict[str, int]]]  # pid -> day read -> usage_field -> value
    events: list[StreamEvent]  # after the durable cursor
    statuses: dict[str, str] = msgspec.field(default_factory=dict)  # pid -> its status, where
    # it has a hash (AccountField.STATUS; absent: active)
    debts: dict[str, int] = msgspec.field(default_factory=dict)  # pid -> credits owed (> 0 only)


class Sums(msgspec.Struct):
    """One account's ledger: durable sums plus its unflushed events. Its grants are what
    the applied ledger entries asked (pools less debt), so ``total`` is what the account's
    pools, less its debt, plus what its open reservations hold, must be."""

    granted_earned: int = 0
    granted_purchased: int = 0
    last_earned_grant: int = 0
    last_earned_expiry: int | None = None
    expired: int = 0
    used: int = 0  # live credits
    used_earned: int = 0
    unflushed_used: int = 0
    unflushed_expired: int = 0
    status: str = ACCOUNT_ACTIVE  # the durable record's (active | disabled)
    usage: dict[str, int] = msgspec.field(default_factory=dict)  # usage_field -> value
    # "YYYY-MM-DD" -> usage_field -> value, the days asked for (unflushed events: any day)
    days: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.granted_earned + self.granted_purchased - self.expired - self.used


async def redis_accounts(redis: RedisClient, layout: KeySpace) -> set[str]:
    """Every account that has a balance hash in Redis (SCAN: never blocks the server)."""
    head = f"{layout.prefix}:{{s"
    found = set()
    async for name in redis.scan_iter(match=f"{layout.prefix}:{{s*}}:acct:*", count=1000):
        text = as_text(name)
        if text.startswith(head):
            found.add(text.split(":acct:", 1)[1])
    return found


def _by_shard(layout: KeySpace, pids: Iterable[str]) -> dict[int, list[str]]:
    shards: dict[int, list[str]] = defaultdict(list)
    for pid in sorted(set(pids)):
        shards[layout.shard(pid)].append(pid)
    return shards


ACCOUNT_READ = [
    AccountField.EARNED,
    AccountField.PURCHASED,
    AccountField.STATUS,
    AccountField.DEBT,
]
HELD_FIELDS = [
    ReservationField.ACCOUNT,
    ReservationField.ENVIRONMENT,
    ReservationField.FROM_EARNED,
    ReservationField.FROM_PURCHASED,
]


async def read_shard(
    redis: RedisClient,
    layout: KeySpace,
    shard: int,
    pids: list[str],
    cursor: str | None,
    days: Sequence[str] = (),
) -> ShardRead:
    """Pools, holds, usage counters (all-time, and those of ``days``) and unflushed events
    of a shard, at one instant.

    All of a shard's keys share one hash tag, so one MULTI reads them atomically (on a
    Cluster too). The reservation ids are read first and again inside the MULTI: when the
    two differ a reservation opened or closed in between, and the shard is read again.
    """
    rsv_key = layout.reservations(shard)
    for _ in range(MAX_READS):
        rids = [as_text(r) for r in await redis.zrange(rsv_key, 0, -1)]
        pipe = redis.pipeline(transaction=True)
        pipe.zrange(rsv_key, 0, -1)
        for pid in pids:
            pipe.hmget(layout.account(shard, pid), ACCOUNT_READ)
            pipe.hgetall(layout.usage_total(shard, pid))
            for day in days:
                pipe.hgetall(layout.usage_day(shard, pid, day_tag(day)))
        for rid in rids:
            pipe.hmget(layout.reservation(shard, rid), HELD_FIELDS)
        pipe.xrange(layout.events(shard), f"({cursor}" if cursor else "-", "+")
        results = await pipe.execute()
        if sorted(as_text(r) for r in results[0]) == sorted(rids):
            return _shard_read(pids, days, results[1:])
    raise service_unavailable()


def _counters(reply: dict[Any, Any]) -> dict[str, int]:
    return {as_text(k): int(v) for k, v in reply.items()}


def _shard_read(pids: list[str], days: Sequence[str], results: list[Any]) -> ShardRead:
    replies = iter(results[:-1])  # in the order read_shard queued them; the stream is last
    pools: dict[str, tuple[int, int]] = {}
    statuses: dict[str, str] = {}
    debts: dict[str, int] = {}
    usage: dict[str, dict[str, int]] = {}
    by_day: dict[str, dict[str, dict[str, int]]] = {}
    for pid in pids:
        earned, purchased, status, debt = next(replies)
        if purchased is not None:
            pools[pid] = (int(earned or 0), int(purchased))
            statuses[pid] = account_status(status)
            if debt is not None and int(debt) > 0:
                debts[pid] = int(debt)
        usage[pid] = _counters(next(replies))
        by_day[pid] = {day: _counters(next(replies)) for day in days}
    held: dict[str, tuple[int, int]] = {}
    for row in replies:  # the reservations
        acct, env, fe, fp = row
        if acct is None or as_text(env) != "live":
            continue  # settled between the two reads (then the ids differ), or a test key
        e, p = held.get(as_text(acct), (0, 0))
        held[as_text(acct)] = (e + int(fe), p + int(fp))
    events = [parse_event(entry_id, fields) for entry_id, fields in results[-1] or []]
    return ShardRead(
        pools=pools,
        held=held,
        usage=usage,
        days=by_day,
        events=events,
        statuses=statuses,
        debts=debts,
    )


def ledger_sums(snapshot: LedgerSnapshot, earned_ttl_s: int) -> dict[str, Sums]:
    """Durable sums per account."""
    sums: dict[str, Sums] = defaultdict(Sums)
    for account in snapshot.accounts:
        sums[account.pid].status = account.status  # every account, even one without a grant
    for g in snapshot.grants:
        s = sums[g.account_pid]
        if g.pool == "earned":
            s.granted_earned += g.credits
            s.last_earned_grant = g.last_granted_at
            s.last_earned_expiry = g.last_expires_at or g.last_granted_at + earned_ttl_s
        else:
            s.granted_purchased += g.credits
    for u in snapshot.usage:
        s = sums[u.account_pid]
        _count(s.usage, u.environment, u.api, [getattr(u, name) for name in COUNTERS])
        if u.environment == "live":
            s.used += u.credits
            s.used_earned += u.earned_credits
    for u in snapshot.usage_days:
        counters = sums[u.account_pid].days.setdefault(u.day, {})
        values = [getattr(u, name) for name in COUNTERS]
        _count(counters, u.environment, u.api, values)
        groups = {GROUP_KEY: u.kid, GROUP_MODEL: u.alias}
        _count_groups(counters, u.environment, groups, UsageCounters(*values))
    for pid, credits in snapshot.expiries.items():
        sums[pid].expired += credits
    return dict(sums)


def _count(counters: dict[str, int], environment: str, api: str, values: list[int]) -> None:
    """Add one API's counter values (in ``COUNTERS`` order) where settle counts them: to
    the environment's fields and, for an API other than chat, to that API's own."""
    for name, value in zip(COUNTERS, values, strict=True):
        for field in {usage_field(environment, name), usage_field(environment, name, api)}:
            counters[field] = counters.get(field, 0) + value


def _count_groups(
    counters: dict[str, int], environment: str, values_of: dict[str, str], used: UsageCounters
) -> None:
    """Add ``used`` where settle counts it in a day hash for the request's key and model
    (``values_of``: group -> its value)."""
    for group, grouped in values_of.items():
        for name, value in zip(GROUP_COUNTERS, group_values(used), strict=True):
            field = group_field(environment, group, grouped, name)
            counters[field] = counters.get(field, 0) + value


def add_unflushed(sums: dict[str, Sums], events: list[StreamEvent]) -> None:
    """Count the events after the durable cursor into the accounts' sums."""
    for e in events:
        s = sums.setdefault(e.account_pid, Sums())
        if isinstance(e, ExpiryEvent):
            s.expired += e.credits
            s.unflushed_expired += e.credits
            continue
        if not isinstance(e, UsageEvent):
            continue  # a notice (low balance, a cap threshold): no credits move
        values = [1, e.prompt_tokens, e.completion_tokens, e.credits]
        # the settle that wrote the event counted it in its reservation's day hash too
        for counters in (s.usage, s.days.setdefault(e.day, {})):
            _count(counters, e.environment, e.api, values)
        groups = {GROUP_KEY: e.kid, GROUP_MODEL: e.alias}
        _count_groups(s.days[e.day], e.environment, groups, UsageCounters(*values))
        if e.environment == "live":
            s.used += e.credits
            s.used_earned += e.earned_credits
            s.unflushed_used += e.credits


Shards = dict[int, tuple[ShardRead, dict[str, Sums]]]


async def consistent_shards(
    redis: RedisClient,
    layout: KeySpace,
    store: Store,
    pids: set[str],
    earned_ttl_s: int,
    days: Sequence[str] = (),
) -> tuple[Shards, set[str]]:
    """Each shard's Redis state with the ledger sums of its accounts (``pids`` and every
    account of the store) at one instant, the usage of ``days`` (``YYYY-MM-DD``) per day
    on both sides; also the accounts the store knows.

    Race with the flusher: it moves events from a stream into the store (and then trims
    them) between any two reads. The store's sums and cursors come from one read
    transaction; the shard is read atomically with only the entries after that cursor;
    then the cursor is read again. Unchanged, no batch was applied in between (the cursor
    only grows, and entries are trimmed only up to it), so each event was counted exactly
    once. Moved, the shard is read again against a fresh snapshot. This never pauses the
    flusher or takes its lease (a busy shard's lease is only free lease_s after its last
    batch, which would make a pass over 64 shards take minutes); a retry costs one more
    snapshot and one more read of the shards that moved.
    """
    done: Shards = {}
    for _ in range(MAX_ROUNDS):
        snapshot = await store.ledger_snapshot(since_day=min(days, default=END_OF_TIME))
        known = {a.pid for a in snapshot.accounts}
        sums = ledger_sums(snapshot, earned_ttl_s)
        shards = _by_shard(layout, pids | set(sums))
        for shard, shard_pids in sorted(shards.items()):
            if shard in done:
                continue
            cursor = snapshot.cursors.get(shard)
            state = await read_shard(redis, layout, shard, shard_pids, cursor, days)
            if await store.get_cursor(shard) != cursor:
                continue  # the flusher applied a batch meanwhile: again next round
            shard_sums = {pid: sums.get(pid, Sums()) for pid in shard_pids}
            add_unflushed(shard_sums, state.events)
            done[shard] = (state, shard_sums)
        if len(done) == len(shards):
            return done, known
    raise service_unavailable()
