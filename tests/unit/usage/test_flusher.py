"""The flusher on every Redis flavour and a real SQLite file: exactly once, whatever fails."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from app.kv.client import RedisClient
from app.kv.fields import NOTHING_SERVED, Served
from app.kv.stream_events import ExpiryEvent, UsageEvent
from app.store import ActivityQuery, ActivityRecord, Store, UsageBatch
from app.usage import flusher as flusher_module
from app.usage.batch_rows import aggregate, expiries
from app.usage.flusher import Flusher, next_stream_id
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, reserve


def _flusher(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock, **kw: float
) -> Flusher:
    return Flusher(redis, ledger.layout, store, clock=clock, **kw)


async def _traffic(ledger: Ledgers, clock: Clock, accounts: int, each: int) -> int:
    """Settled requests on several accounts (several shards); returns Σ credits charged."""
    charged = 0
    for a in range(accounts):
        pid = f"acct_F{a}"
        await account(ledger, pid, purchased=10_000)
        ident = await key(ledger, pid, f"kidF{a:08d}")
        for i in range(each):
            hold = await reserve(ledger, ident, f"r{a}-{i}", clock())
            used = 1 + i % 3
            settled = await ledger.holds.settle(
                hold,
                now=clock(),
                credits_used=used,
                prompt_tokens=5,
                completion_tokens=used,
                outcome="completed",
            )
            charged += settled.credits_used
    return charged


async def _durable_credits(store: Store, accounts: int) -> tuple[int, int]:
    credits = requests = 0
    for a in range(accounts):
        totals = await store.usage_totals(f"acct_F{a}")
        if totals is not None:
            credits += totals.credits
            requests += totals.requests
    return credits, requests


async def _activity(store: Store, accounts: int) -> list[ActivityRecord]:
    """Every activity row of the accounts ``_traffic`` used."""
    rows: list[ActivityRecord] = []
    for a in range(accounts):
        query = ActivityQuery(account_pid=f"acct_F{a}", environment="live", limit=500)
        rows += await store.list_activity(query)
    return rows


async def _pending(ledger: Ledgers) -> int:
    return sum(
        [await ledger.redis.xlen(ledger.layout.events(s)) for s in range(ledger.layout.shards)]
    )


def test_aggregate_sums_per_key_day_alias_environment_api() -> None:
    def ev(i: int, kid: str, day: str, env: str = "live", api: str = "chat") -> UsageEvent:
        return UsageEvent(f"{i}-0", "acct_A", kid, env, "svc-fast", day, 10, i, i * 2, api=api)

    rollups = aggregate(
        [
            ev(1, "k1", "d1"),
            ev(2, "k1", "d1"),
            ev(3, "k2", "d1"),
            ev(4, "k1", "d1", "test"),
            ev(5, "k1", "d1", api="responses"),
        ]
    )
    assert [
        (r.kid, r.environment, r.api, r.requests, r.prompt_tokens, r.completion_tokens, r.credits)
        for r in rollups
    ] == [
        ("k1", "live", "chat", 2, 20, 3, 6),
        ("k2", "live", "chat", 1, 10, 3, 6),
        ("k1", "test", "chat", 1, 10, 4, 8),
        ("k1", "live", "responses", 1, 10, 5, 10),
    ]
    assert next_stream_id("1700000000000-7") == "1700000000000-8"


async def test_events_reach_the_store_once_and_leave_the_stream(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    charged = await _traffic(ledger, clock, accounts=6, each=7)
    flusher = _flusher(redis, ledger, store, clock, batch_size=5)
    lag = await flusher.lag()
    assert lag.pending_events == 42
    assert await flusher.flush_all() == 42
    assert await _durable_credits(store, 6) == (charged, 42)
    assert await _pending(ledger) == 0
    assert await flusher.flush_all() == 0  # nothing twice
    assert await _durable_credits(store, 6) == (charged, 42)
    assert (await flusher.lag()).pending_events == 0


async def test_a_crash_between_commit_and_trim_is_not_counted_twice(
    redis: RedisClient,
    ledger: Ledgers,
    store: Store,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    charged = await _traffic(ledger, clock, accounts=3, each=4)
    first = _flusher(redis, ledger, store, clock)

    async def die(*args: object, **kwargs: object) -> None:
        raise ConnectionError("worker killed after the commit")

    monkeypatch.setattr(first, "_trim", die)  # every trim of the streams goes through it
    with pytest.raises(ConnectionError):
        await first.flush_all()
    monkeypatch.undo()
    assert await _pending(ledger) > 0  # committed but not trimmed
    # another worker takes over (the dead one's leases lapse) and replays from the stream
    for shard in range(ledger.layout.shards):
        await redis.delete(ledger.layout.flush_lease(shard))
    await _flusher(redis, ledger, store, clock).flush_all()
    await _flusher(redis, ledger, store, clock).flush_all()
    assert await _durable_credits(store, 3) == (charged, 12)
    assert await _pending(ledger) == 0
    rows = await _activity(store, 3)  # one row per request, whatever was replayed
    assert (len(rows), sum(r.credits_used for r in rows)) == (12, charged)
    assert len({r.id for r in rows}) == 12


async def test_racing_flushers_never_double_count(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    charged = await _traffic(ledger, clock, accounts=8, each=5)
    # leases that lapse at once: every flusher drains every shard, concurrently
    flushers = [
        _flusher(redis, ledger, store, clock, batch_size=3, lease_s=0.001) for _ in range(4)
    ]
    await asyncio.gather(*(f.flush_all() for f in flushers))
    await asyncio.gather(*(f.flush_all() for f in flushers))
    assert sum(f.applied for f in flushers) == 40
    assert await _durable_credits(store, 8) == (charged, 40)
    rows = await _activity(store, 8)
    assert (len(rows), sum(r.credits_used for r in rows)) == (40, charged)


async def test_activity_rows_tell_what_settle_was_told_and_old_days_are_pruned(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    await account(ledger, "acct_F0", purchased=10_000)
    ident = await key(ledger, "acct_F0", "kidF00000000")
    for n, served in enumerate(
        [
            Served(
                response_id="chatcmpl-svc-9",
                created=int(clock()) - 2,
                ttfb_ms=12,
                duration_ms=2_000,
                usage_source="upstream",
            ),
            NOTHING_SERVED,
        ]
    ):
        hold = await reserve(ledger, ident, f"r{n}", clock())
        await ledger.holds.settle(
            hold,
            now=clock(),
            credits_used=4,
            prompt_tokens=5,
            completion_tokens=3,
            outcome=("completed", "swept")[n],
            served=served,
            failovers=1 - n,
        )
    flushers = [_flusher(redis, ledger, store, clock, activity_days=1) for _ in range(2)]
    await flushers[0].flush_all()
    swept, served_row = await _activity(store, 1)
    assert (served_row.id, served_row.created, served_row.ttfb_ms, served_row.duration_ms) == (
        "chatcmpl-svc-9",
        int(clock()) - 2,
        12,
        2_000,
    )
    assert (served_row.usage_source, served_row.outcome, served_row.kid) == (
        "upstream",
        "completed",
        "kidF00000000",
    )
    assert (served_row.failovers, swept.failovers) == (1, None)  # the sweeper knows none
    # the sweeper knows no response: the row is named by its reservation, timed by its settle
    assert (swept.id, swept.created, swept.usage_source, swept.outcome) == (
        "r1",
        int(clock()),
        "estimated",
        "swept",
    )
    clock.advance(86_400)
    assert await flushers[0].prune_activity() == 0  # the day before is still kept
    clock.advance(86_400)
    assert await flushers[1].prune_activity() == 0  # one pruner at a time: the lease
    assert await flushers[0].prune_activity() == 2
    assert await _activity(store, 1) == []


async def test_a_shard_has_one_drainer_while_its_lease_lives(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    await _traffic(ledger, clock, accounts=2, each=2)
    holder = _flusher(redis, ledger, store, clock, lease_s=60)
    other = _flusher(redis, ledger, store, clock, lease_s=60)
    shard = ledger.layout.shard("acct_F0")
    await redis.set(ledger.layout.flush_lease(shard), holder.token, px=60_000)
    assert await other.flush_shard(shard) == 0
    assert await holder.flush_shard(shard) > 0


async def test_a_carried_cursor_another_drainer_moved_is_read_again(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    # The holder carries its cursor from batch to batch; another drainer applies a batch
    # while the holder's lease token is (wrongly) its own, as after a lapse nobody saw.
    charged = await _traffic(ledger, clock, accounts=1, each=3)
    shard = ledger.layout.shard("acct_F0")
    lease = ledger.layout.flush_lease(shard)
    holder = _flusher(redis, ledger, store, clock, lease_s=60)
    other = _flusher(redis, ledger, store, clock, lease_s=60)
    assert await holder.flush_shard(shard) == 3
    charged += await _traffic(ledger, clock, accounts=1, each=2)
    await redis.set(lease, other.token, px=60_000)
    assert await other.flush_shard(shard) == 5 - 3
    await redis.set(lease, holder.token, px=60_000)
    charged += await _traffic(ledger, clock, accounts=1, each=4)
    # its first batch starts below the durable cursor: refused, the cursor is read again
    assert await holder.flush_shard(shard) == 4
    assert await _durable_credits(store, 1) == (charged, 9)
    assert len(await _activity(store, 1)) == 9  # one row per event
    assert await _pending(ledger) == 0


async def test_a_pass_drains_the_shards_whose_lease_it_holds_once_each(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    # flush_all asks for every busy shard's lease at once and reads the first batch of the
    # shards it kept with the renewal: the other drainer's shard is left alone, a moved
    # cursor is read again, and every event is applied once.
    charged = await _traffic(ledger, clock, accounts=4, each=3)
    shard = ledger.layout.shard("acct_F0")
    lease = ledger.layout.flush_lease(shard)
    holder = _flusher(redis, ledger, store, clock, lease_s=60)
    other = _flusher(redis, ledger, store, clock, lease_s=60)
    await redis.set(lease, holder.token, px=60_000)
    others = sum(1 for a in range(4) if ledger.layout.shard(f"acct_F{a}") == shard)
    assert await other.flush_all() == 12 - 3 * others
    assert await holder.flush_all() == 3 * others
    for _ in range(2):  # renewed, with the carried cursors: the first batches prefetched
        charged += await _traffic(ledger, clock, accounts=4, each=2)
        assert await holder.flush_all() + await other.flush_all() == 8
    await redis.set(lease, other.token, px=60_000)
    charged += await _traffic(ledger, clock, accounts=4, each=1)
    assert await other.flush_all() == 4  # every shard now (the holder's lapsed, say)
    await redis.set(lease, holder.token, px=60_000)
    charged += await _traffic(ledger, clock, accounts=4, each=1)
    assert await holder.flush_all() + await other.flush_all() == 4
    assert await _durable_credits(store, 4) == (charged, 36)
    assert len(await _activity(store, 4)) == 36
    assert await _pending(ledger) == 0


async def test_a_pass_reads_ahead_no_more_than_its_bound_and_drains_every_backlog(
    redis: RedisClient,
    ledger: Ledgers,
    store: Store,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Carried cursors on several shards with a backlog each: a pass reads their first
    # batches a group of about READ_AHEAD_EVENTS at a time, and a full first batch does not
    # end its shard's drain: the rest follows in full batches, every event applied once.
    monkeypatch.setattr(flusher_module, "READ_AHEAD_EVENTS", 8)
    charged = await _traffic(ledger, clock, accounts=4, each=1)
    flusher = _flusher(redis, ledger, store, clock, lease_s=60, batch_size=5)
    assert await flusher.flush_all() == 4  # every shard's cursor carried from now on
    read_ahead: list[int] = []
    read = flusher._read_ahead

    async def spied(shards: list[int]) -> dict[int, object]:
        firsts = await read(shards)
        read_ahead.append(sum(len(entries) for entries in firsts.values()))
        return firsts

    charged += await _traffic(ledger, clock, accounts=4, each=7)
    monkeypatch.setattr(flusher, "_read_ahead", spied)
    assert await flusher.flush_all() == 28
    assert read_ahead == [5, 5, 5, 5]  # 7 + 7 > 8: a group each, its batch full
    assert await _durable_credits(store, 4) == (charged, 32)
    assert len(await _activity(store, 4)) == 32
    assert await _pending(ledger) == 0


async def test_a_pass_applies_a_group_of_shards_in_one_store_transaction(
    redis: RedisClient,
    ledger: Ledgers,
    store: Store,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Carried cursors on four shards: their batches, read ahead together, are applied in
    # one call of the store (one transaction).
    charged = await _traffic(ledger, clock, accounts=4, each=1)
    flusher = _flusher(redis, ledger, store, clock, lease_s=60)
    assert await flusher.flush_all() == 4  # every shard's cursor carried from now on
    calls: list[list[int]] = []
    apply = store.apply_usage_batches

    async def spied(batches: Sequence[UsageBatch]) -> list[bool]:
        calls.append(sorted(b.shard for b in batches))
        return await apply(batches)

    monkeypatch.setattr(store, "apply_usage_batches", spied)
    charged += await _traffic(ledger, clock, accounts=4, each=2)
    assert await flusher.flush_all() == 8
    assert [len(shards) for shards in calls] == [4]  # one call, every shard in it
    assert await _durable_credits(store, 4) == (charged, 12)
    assert await _pending(ledger) == 0


def test_read_ahead_groups_hold_their_bound_and_one_shard_at_least() -> None:
    lengths = {1: 3, 2: 4, 3: 9, 4: 1, 5: 2}
    assert flusher_module.read_ahead_groups([1, 2, 3, 4, 5], lengths, 8) == [
        [1, 2],
        [3],  # alone past the bound
        [4, 5],
    ]
    assert flusher_module.read_ahead_groups([3, 1], lengths, 8) == [[3], [1]]
    assert flusher_module.read_ahead_groups([], lengths, 8) == []


async def test_expiries_and_old_events_flush_once(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    stream = ledger.layout.events(3)
    # a usage event as scripts wrote it before the earned part was recorded, and an expiry
    await redis.xadd(
        stream,
        {
            "rid": "r1", "acct": "acct_O", "kid": "k1", "env": "live", "alias": "svc-fast",
            "requested": "svc-fast", "day": "2026-01-02", "prompt_tokens": 3,
            "completion_tokens": 4, "credits": 5, "outcome": "completed", "ts": 1,
        },
    )  # fmt: skip
    await redis.xadd(stream, {"kind": "expire", "acct": "acct_O", "credits": 70, "ts": 2})
    flusher = _flusher(redis, ledger, store, clock)
    assert await flusher.flush_shard(3) == 2
    snap = await store.ledger_snapshot()
    (usage,) = snap.usage
    assert (usage.credits, usage.earned_credits, snap.expiries) == (5, 0, {"acct_O": 70})
    # the same expiry again (a replay under another cursor) is stored once
    (entry_id, _), *_ = await redis.xrange(stream) or [(None, None)]
    last = snap.cursors[3]
    again = expiries(3, [ExpiryEvent(last, "acct_O", 70, 2)])
    assert await store.apply_usage(3, next_stream_id(last), [], expiries=again)
    assert (await store.ledger_snapshot()).expiries == {"acct_O": 70}
    assert entry_id is None  # trimmed after the commit


async def test_the_final_flush_lets_go_of_its_leases_and_waits_for_another_s(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    charged = await _traffic(ledger, clock, accounts=3, each=2)
    first = _flusher(redis, ledger, store, clock, lease_s=60)
    second = _flusher(redis, ledger, store, clock, lease_s=60)
    await first.flush_all()  # first now holds every busy shard's lease for a minute
    await _traffic_more(ledger, clock)  # settled after: only a drainer with the lease flushes
    # a worker exiting while another still holds the leases waits for them (here: in vain)
    assert await second.final_flush(wait_s=0.3) == 0
    assert await _pending(ledger) == 2
    await first.final_flush(wait_s=0.3)  # exits: flushes what it can, then lets go
    shard = ledger.layout.shard("acct_F0")
    assert await redis.get(ledger.layout.flush_lease(shard)) is None
    await _traffic_more(ledger, clock, rid="late")
    assert await second.final_flush(wait_s=5) == 2  # no wait for a lapse: taken at once
    assert await _pending(ledger) == 0
    assert await _durable_credits(store, 3) == (charged + 4, 3 * 2 + 4)


async def _traffic_more(ledger: Ledgers, clock: Clock, rid: str = "more") -> None:
    """Two more settled requests (1 credit each) on acct_F0 and acct_F1."""
    for a in (0, 1):
        ident = await key(ledger, f"acct_F{a}", f"kidF{a:08d}")
        hold = await reserve(ledger, ident, f"{rid}-{a}", clock())
        await ledger.holds.settle(
            hold,
            now=clock(),
            credits_used=1,
            prompt_tokens=5,
            completion_tokens=1,
            outcome="completed",
        )
