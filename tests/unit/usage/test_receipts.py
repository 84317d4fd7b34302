"""Receipts on every Redis flavour and a real SQLite file: found by id in the usage stream
before the flusher has run, the same once it has, for the owning account and environment
only; a swept request by its reservation; the stream read no deeper than its bound."""

from __future__ import annotations

import msgspec
import pytest

from app.completion.catalog import price
from app.core.errors import ApiError, ErrorKind
from app.credits.outcomes import Identity, Tokens
from app.kv.client import RedisClient
from app.kv.fields import Served
from app.kv.layout import as_text
from app.kv.stream_events import EventField
from app.store import ActivityRecord, Store
from app.usage.flusher import Flusher
from app.usage.receipts import Receipt, Receipts, is_activity_id, receipt
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, reserve

PID = "acct_R0"
KID = "kidR00000000"


def _receipts(ledger: Ledgers, store: Store, **bounds: int) -> Receipts:
    return Receipts(store, ledger.redis, ledger.layout, **bounds)


def _flusher(ledger: Ledgers, store: Store, clock: Clock) -> Flusher:
    return Flusher(ledger.redis, ledger.layout, store, clock=clock)


async def _settled(
    ledger: Ledgers,
    ident: Identity,
    clock: Clock,
    n: int,
    *,
    used: int = 5,
    served: Served | None = None,
    failovers: int = 0,
) -> str:
    """One request of ``ident`` settled at ``used`` credits; its id (``chatcmpl-svc-<n>``)."""
    if served is None:
        served = Served(
            response_id=f"chatcmpl-svc-{n}",
            created=int(clock()) - 1,
            ttfb_ms=40 + n,
            duration_ms=900 + n,
            usage_source="upstream",
        )
    hold = await reserve(ledger, ident, f"rsv_R{n:06d}", clock())
    await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=used,
        prompt_tokens=12,
        completion_tokens=used,
        outcome="completed",
        served=served,
        failovers=failovers,
    )
    return served.response_id or hold.rid


async def _not_found(receipts: Receipts, pid: str, id: str, environment: str | None) -> None:
    with pytest.raises(ApiError) as raised:
        await receipts.find(pid, id, environment)
    assert raised.value.kind is ErrorKind.ACTIVITY_NOT_FOUND
    assert (raised.value.kind.status, raised.value.param) == (404, "activity_id")


async def test_a_receipt_is_read_from_the_stream_before_the_flusher_and_is_the_same_after(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    # 3 earned (taken first), the rest purchased
    await ledger.money.open_account(PID, earned=3, earned_exp=int(clock()) + 86_400, purchased=100)
    ident = await key(ledger, PID, KID)
    first = await _settled(ledger, ident, clock, 1)
    later = await _settled(ledger, ident, clock, 2, used=2)
    receipts = _receipts(ledger, store)
    before = await receipts.find(PID, first, "live")
    assert before == Receipt(
        id="chatcmpl-svc-1",
        created=int(clock()) - 1,
        key_id="key_" + KID,
        environment="live",
        api="chat",
        requested_model="svc-auto",
        model="svc-fast",
        outcome="completed",
        prompt_tokens=12,
        completion_tokens=5,
        total_tokens=17,
        cached_tokens=0,
        cache_write_tokens=0,
        reasoning_tokens=0,
        usage_source="upstream",
        credits_used=5,
        prices=None,  # its served text names none (test_receipt_prices: one that does)
        earned_credits=3,
        purchased_credits=2,
        failovers=0,
        ttfb_ms=41,
        duration_ms=901,
    )
    second = await receipts.find(PID, later, "live")
    assert (second.credits_used, second.earned_credits, second.purchased_credits) == (2, 0, 2)
    assert await store.get_activity(PID, first) is None  # not flushed: from the stream

    assert await _flusher(ledger, store, clock).flush_all() == 2
    assert await redis.xlen(ledger.layout.events(ident.shard)) == 0  # trimmed
    assert await receipts.find(PID, first, "live") == before  # now from the store
    assert await receipts.find(PID, later, None) == second


async def test_a_receipt_keeps_the_cached_cache_write_and_reasoning_tokens(
    ledger: Ledgers, store: Store, clock: Clock
) -> None:
    await account(ledger, PID, purchased=100_000)
    ident = await key(ledger, PID, KID)
    hold = await reserve(ledger, ident, "rsv_Rparts0", clock(), max_out=1_000)
    served = Served(
        response_id="chatcmpl-svc-parts",
        created=int(clock()),
        ttfb_ms=5,
        duration_ms=9,
        usage_source="upstream",
    )
    done = await ledger.holds.settle(
        hold,
        now=clock(),
        rates=price(20, 60, cache_write=25).rates,
        tokens=Tokens(1_000, 100, 600, 300, 40),
        outcome="completed",
        served=served,
    )
    # 100 uncached x 20 + 600 cached x 5 + 300 written x 25 + 100 x 60 = 18,500
    assert done.credits_used == 19
    receipts = _receipts(ledger, store)
    for flushed in (False, True):
        found = await receipts.find(PID, "chatcmpl-svc-parts", "live")
        assert (found.cached_tokens, found.cache_write_tokens, found.reasoning_tokens) == (
            600,
            300,
            40,
        )
        assert (found.prompt_tokens, found.completion_tokens, found.credits_used) == (
            1_000,
            100,
            19,
        )
        if not flushed:
            assert await _flusher(ledger, store, clock).flush_all() == 1
    row = await store.get_activity(PID, "chatcmpl-svc-parts")
    assert row is not None
    assert (row.cached_tokens, row.cache_write_tokens, row.reasoning_tokens) == (600, 300, 40)


async def test_a_receipt_tells_the_failovers_before_and_after_the_flush(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    """The upstreams a request failed over from, as settle was told: from the usage stream
    before the flusher has run, the same from the row after; 0 (the first upstream served)
    is not written in the stream's entry, and reads as 0."""
    await account(ledger, PID, purchased=1_000)
    ident = await key(ledger, PID, KID)
    twice = await _settled(ledger, ident, clock, 1, failovers=2)
    first = await _settled(ledger, ident, clock, 2)
    entries = await redis.xrange(ledger.layout.events(ident.shard))
    written = [{as_text(k): as_text(v) for k, v in fields.items()} for _, fields in entries]
    assert [e.get(EventField.FAILOVERS) for e in written] == ["2", None]
    receipts = _receipts(ledger, store)
    before = [await receipts.find(PID, i, "live") for i in (twice, first)]
    assert [r.failovers for r in before] == [2, 0]
    assert await _flusher(ledger, store, clock).flush_all() == 2
    rows = [await store.get_activity(PID, i) for i in (twice, first)]
    assert [r.failovers if r else "missing" for r in rows] == [2, 0]
    assert [await receipts.find(PID, i, "live") for i in (twice, first)] == before


async def test_only_the_owning_account_and_environment_see_a_receipt(
    ledger: Ledgers, store: Store, clock: Clock
) -> None:
    # two accounts on one shard: the other's scan reads the entry, and must not show it
    shard = ledger.layout.shard(PID)
    other = next(f"acct_O{i}" for i in range(10_000) if ledger.layout.shard(f"acct_O{i}") == shard)
    for pid in (PID, other):
        await account(ledger, pid, purchased=1_000)
    live = await key(ledger, PID, KID)
    test = await key(ledger, PID, "kidRtest0000", environment="test")
    live_id = await _settled(ledger, live, clock, 1)
    test_id = await _settled(ledger, test, clock, 2)
    receipts = _receipts(ledger, store)
    for flushed in (False, True):
        await _not_found(receipts, other, live_id, "live")
        await _not_found(receipts, other, live_id, None)
        await _not_found(receipts, PID, test_id, "live")  # a live key: live activity only
        await _not_found(receipts, PID, live_id, "test")
        shown = await receipts.find(PID, test_id, "test")
        # a test key is charged nothing: no pool paid
        assert (shown.environment, shown.credits_used) == ("test", 5)
        assert (shown.earned_credits, shown.purchased_credits) == (None, None)
        assert await receipts.find(PID, test_id, None) == shown  # the operator's view
        assert (await receipts.find(PID, live_id, "live")).purchased_credits == 5
        if not flushed:
            await _flusher(ledger, store, clock).flush_all()


async def test_a_swept_request_is_found_by_its_reservation_and_a_served_one_is_not(
    ledger: Ledgers, store: Store, clock: Clock
) -> None:
    await account(ledger, PID, purchased=1_000)
    ident = await key(ledger, PID, KID)
    served = await _settled(ledger, ident, clock, 1)
    hold = await reserve(ledger, ident, "rsv_Swept0000001", clock(), deadline=clock() + 5)
    clock.advance(10)  # its worker died: the sweeper refunds it past its deadline
    settled = await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=0,
        prompt_tokens=0,
        completion_tokens=0,
        outcome="swept",
        only_if_expired=True,
    )
    assert settled.credits_used == 0
    receipts = _receipts(ledger, store)
    for flushed in (False, True):
        swept = await receipts.find(PID, "rsv_Swept0000001", "live")
        assert (swept.id, swept.outcome, swept.credits_used) == ("rsv_Swept0000001", "swept", 0)
        assert (swept.created, swept.ttfb_ms, swept.duration_ms) == (int(clock()), 0, 0)
        assert (swept.earned_credits, swept.purchased_credits) == (0, 0)
        assert swept.failovers is None  # its worker stopped before it could tell
        # a request that was served is named by its response's id, never its reservation's
        await _not_found(receipts, PID, "rsv_R000001", "live")
        assert (await receipts.find(PID, served, "live")).outcome == "completed"
        if not flushed:
            await _flusher(ledger, store, clock).flush_all()


async def test_the_stream_is_read_newest_first_and_no_deeper_than_its_bound(
    ledger: Ledgers, store: Store, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await account(ledger, PID, purchased=1_000)
    ident = await key(ledger, PID, KID)
    ids = [await _settled(ledger, ident, clock, n, used=1) for n in range(10)]
    receipts = _receipts(ledger, store, scan_page=3, scan_limit=7)
    reads: list[int] = []
    xrevrange = ledger.redis.xrevrange

    async def counted(*args: object, **kwargs: object) -> object:
        reads.append(1)
        return await xrevrange(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ledger.redis, "xrevrange", counted)
    assert (await receipts.find(PID, ids[-1], "live")).id == ids[-1]
    assert len(reads) == 1  # the request just settled: the first page
    reads.clear()
    assert (await receipts.find(PID, ids[3], "live")).id == ids[3]  # the 7th newest
    assert len(reads) == 3
    reads.clear()
    await _not_found(receipts, PID, ids[2], "live")  # deeper than the bound (until flushed)
    assert len(reads) == 3  # 3 + 3 + 1 entries, never more
    reads.clear()
    await _not_found(receipts, PID, "chatcmpl-svc-999", "live")
    assert len(reads) == 3
    await _flusher(ledger, store, clock).flush_all()
    reads.clear()
    assert (await receipts.find(PID, ids[2], "live")).id == ids[2]
    assert reads == []  # durable: the stream is not read


async def test_an_id_svc_never_makes_is_not_looked_up(
    ledger: Ledgers, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    receipts = _receipts(ledger, store)

    async def never(*args: object) -> object:
        raise AssertionError("looked up")

    monkeypatch.setattr(store, "get_activity", never)
    for bad in ("", "chatcmpl-1", "key_abc", "chatcmpl-svc-1 2", "rsv_" + "a" * 200, "rsv_ä"):
        assert not is_activity_id(bad)
        await _not_found(receipts, PID, bad, None)
    for good in ("chatcmpl-svc-7012", "resp_svc_9c1e0f", "msg_svc_02ab", "rsv_4fJ2kQ9zLm0aBcDe"):
        assert is_activity_id(good)


async def test_a_stream_that_ends_meanwhile_in_the_store_is_still_found(
    ledger: Ledgers, store: Store, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store misses, then a flusher writes the row and trims the entry before the
    stream is read: the store's second read finds it."""
    await account(ledger, PID, purchased=1_000)
    ident = await key(ledger, PID, KID)
    found = await _settled(ledger, ident, clock, 1)
    receipts = _receipts(ledger, store)
    pending = receipts.pending

    async def flushed_meanwhile(pid: str, id: str) -> ActivityRecord | None:
        await _flusher(ledger, store, clock).flush_all()
        return await pending(pid, id)

    monkeypatch.setattr(receipts, "pending", flushed_meanwhile)
    assert (await receipts.find(PID, found, "live")).id == found


def test_a_row_from_before_the_split_was_kept_tells_no_split() -> None:
    row = ActivityRecord(
        event_key="3:1-0",
        account_pid=PID,
        environment="live",
        created=1,
        id="chatcmpl-svc-1",
        kid=KID,
        requested_model="svc-fast",
        model="svc-fast",
        api="chat",
        prompt_tokens=1,
        completion_tokens=2,
        credits_used=3,
        outcome="completed",
        ttfb_ms=4,
        duration_ms=5,
        usage_source="estimated",
    )
    assert (receipt(row).earned_credits, receipt(row).purchased_credits) == (None, None)
    assert receipt(row).failovers is None  # not known either
    split = receipt(msgspec.structs.replace(row, earned_credits=1))
    assert (split.earned_credits, split.purchased_credits, split.total_tokens) == (1, 2, 3)
