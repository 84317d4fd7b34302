"""Issue 44, item 4: a key whose daily cap is taken by holds of requests in flight is told to
come back in a few seconds (429 ``daily_cap_held``, ``x-should-retry: true``), not at
midnight; ``daily_cap_exceeded`` only once settled spend leaves the request no room. The
cap counter's held part is kept beside it (``<cap counter>:held``) by reserve, settle and
the sweeper's refund (on fakeredis, a real Valkey and the Cluster: the ``redis`` fixture)."""

from __future__ import annotations

import asyncio
import random

import pytest

from app.core.clock import day_tag, utc_day
from app.core.errors import CAP_HELD_RETRY_AFTER_S, ApiError, ErrorKind
from app.credits.outcomes import Hold, Identity, Refusal, ScriptStatus
from app.credits.sweeper import Sweeper
from app.keys.refusals import refusal_error
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, reserve, reserved


def _counters(ledger: Ledgers, ident: Identity, now: float) -> tuple[str, str]:
    cap_key = ledger.layout.cap(ident.shard, ident.cap_kid, day_tag(utc_day(now)))
    return cap_key, ledger.layout.cap_held(cap_key)


async def _int(ledger: Ledgers, name: str) -> int:
    return int(await ledger.redis.get(name) or 0)


async def _default_cap_request(ledger: Ledgers, ident: Identity, rid: str, now: float) -> object:
    """A request without max_tokens (min_out 16 of the default 4,096), prompt ~1 credit."""
    return await reserved(
        ledger, ident, rid, now, prompt_units=200, output_price=15, max_out=4096, min_out=16
    )


async def test_200_concurrent_requests_on_a_held_cap_are_told_to_retry_soon(
    ledger: Ledgers, clock: Clock
) -> None:
    """The issue's scenario: cap 100, 200 concurrent requests without max_tokens. None is
    told to stop until midnight while nothing has settled; each refusal is retryable."""
    await account(ledger, "acct_A", purchased=1_000_000)
    ident = await key(ledger, "acct_A", "k1", cap=100)
    gate = asyncio.Semaphore(32)  # the test client's connection pool; all 200 stay held

    async def one(n: int) -> object:
        async with gate:
            return await _default_cap_request(ledger, ident, f"r{n}", clock())

    answers = await asyncio.gather(*(one(n) for n in range(200)))
    holds = [a for a in answers if isinstance(a, Hold)]
    refusals = [a for a in answers if isinstance(a, Refusal)]
    assert len(holds) + len(refusals) == 200
    assert len(holds) >= 15
    assert refusals
    assert {r.status for r in refusals} == {ScriptStatus.DAILY_CAP_HELD}
    cap_key, held_key = _counters(ledger, ident, clock())
    assert (
        await _int(ledger, held_key) == await _int(ledger, cap_key) == sum(h.amount for h in holds)
    )
    error = refusal_error(refusals[0])
    assert (error.status, error.kind.code) == (429, "daily_cap_held")
    assert error.headers == {
        "x-should-retry": "true",
        "retry-after": str(CAP_HELD_RETRY_AFTER_S),
    }
    # each settles at 1 credit: 17-odd of 100 spent, and the next request is served
    for hold in holds:
        done = await ledger.holds.settle(
            hold, now=clock(), credits_used=1, completion_tokens=1, outcome="completed"
        )
        assert done.status is ScriptStatus.OK
    assert await ledger.redis.exists(held_key) == 0
    assert await _int(ledger, cap_key) == len(holds)
    assert isinstance(await _default_cap_request(ledger, ident, "next", clock()), Hold)


async def test_exceeded_once_settled_spend_leaves_no_room(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1", cap=30)
    first = await reserve(ledger, ident, "r1", clock(), max_out=20)
    # 20 held + 0 settled: a request of 25 would fit once r1 settles (it may use little)
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r2", clock(), max_out=25)
    assert info.value.kind is ErrorKind.DAILY_CAP_HELD
    # but one of 31 never fits, whatever the holds do: final
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r3", clock(), max_out=31)
    assert info.value.kind is ErrorKind.DAILY_CAP_EXCEEDED
    assert info.value.headers["x-should-retry"] == "false"
    await ledger.holds.settle(
        first, now=clock(), credits_used=20, completion_tokens=20, outcome="completed"
    )
    # 20 settled: 25 no longer fits, and no hold is left to wait for
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r2", clock(), max_out=25)
    assert info.value.kind is ErrorKind.DAILY_CAP_EXCEEDED
    assert (await reserve(ledger, ident, "r4", clock(), max_out=10)).amount == 10


async def test_the_sweepers_refund_and_a_release_take_the_hold_out(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1", cap=50)
    cap_key, held_key = _counters(ledger, ident, clock())
    await reserve(ledger, ident, "dead", clock(), max_out=30, deadline=clock() + 5)
    await reserve(ledger, ident, "lost", clock(), max_out=15)
    assert await _int(ledger, held_key) == 45
    clock.advance(10)
    assert await Sweeper(ledger.holds, interval_s=1, clock=clock).sweep_once() == 1
    assert (await _int(ledger, held_key), await _int(ledger, cap_key)) == (15, 15)
    released = await ledger.holds.release_unanswered(
        ident, "lost", reserved_at=clock() - 10, now=clock()
    )
    assert released.status is ScriptStatus.OK
    assert await ledger.redis.exists(held_key) == 0
    assert await _int(ledger, cap_key) == 0


async def test_counters_of_the_old_code_keep_working_across_the_upgrade(
    ledger: Ledgers, clock: Clock
) -> None:
    """The day of the upgrade: the cap counter holds what the old code counted (settled
    and held, no held counter) and old reservations lack the mark (ch). They count as
    settled until they settle (the old answer, exceeded), and their settle leaves the
    held counter, which never had them, alone."""
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1", cap=100)
    cap_key, held_key = _counters(ledger, ident, clock())
    old = await reserve(ledger, ident, "old", clock(), max_out=60)
    # as the old code left it
    await ledger.redis.hdel(ledger.layout.reservation(ident.shard, "old"), "ch")
    await ledger.redis.delete(held_key)
    await ledger.redis.incrby(cap_key, 30)  # settled by the old code earlier that day
    new = await reserve(ledger, ident, "new", clock(), max_out=10)
    assert await _int(ledger, held_key) == 10
    with pytest.raises(ApiError) as info:  # 90 settled, as far as anyone can tell
        await reserve(ledger, ident, "r3", clock(), max_out=15)
    assert info.value.kind is ErrorKind.DAILY_CAP_EXCEEDED
    with pytest.raises(ApiError) as info:  # would fit beside those 90: "new" will go
        await reserve(ledger, ident, "r3", clock(), max_out=5)
    assert info.value.kind is ErrorKind.DAILY_CAP_HELD
    await ledger.holds.settle(
        old, now=clock(), credits_used=5, completion_tokens=5, outcome="completed"
    )
    assert (await _int(ledger, held_key), await _int(ledger, cap_key)) == (10, 45)
    await ledger.holds.settle(
        new, now=clock(), credits_used=10, completion_tokens=10, outcome="completed"
    )
    assert await ledger.redis.exists(held_key) == 0
    assert await _int(ledger, cap_key) == 45


async def test_test_keys_and_uncapped_keys(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=5)
    test_key = await key(ledger, "acct_A", "kt", environment="test", cap=20)
    await reserve(ledger, test_key, "t1", clock(), max_out=20)
    with pytest.raises(ApiError) as info:
        await reserve(ledger, test_key, "t2", clock(), max_out=5)
    assert info.value.kind is ErrorKind.DAILY_CAP_HELD
    # a key without a cap or a rate limit keeps no held counter and marks no hold
    free = await key(ledger, "acct_A", "kf")
    await reserve(ledger, free, "f1", clock(), max_out=3)
    _, held_key = _counters(ledger, free, clock())
    assert await ledger.redis.exists(held_key) == 0
    assert await ledger.redis.hget(ledger.layout.reservation(free.shard, "f1"), "ch") == b"0"


async def test_a_rate_limited_creator_s_hold_leaves_its_capped_child_a_retry(
    ledger: Ledgers, clock: Clock
) -> None:
    """Issue 44 review: a rate-limited key without a cap shares its lineage (its cap
    counter) with the capped keys it makes; its holds in flight are holds too, so its child
    is told daily_cap_held (retry soon), not daily_cap_exceeded, and is served once the
    creator's stream settles."""
    await account(ledger, "acct_A", purchased=10_000)
    creator = await key(ledger, "acct_A", "kc", rpm=100)
    child = await key(ledger, "acct_A", "kd", cap=50, lineage="kc")
    cap_key, held_key = _counters(ledger, child, clock())
    assert _counters(ledger, creator, clock()) == (cap_key, held_key)  # one lineage
    stream = await reserve(ledger, creator, "big", clock(), max_out=500)
    assert await _int(ledger, held_key) == await _int(ledger, cap_key) == 500
    assert await ledger.redis.hget(ledger.layout.reservation(creator.shard, "big"), "ch") == b"1"
    with pytest.raises(ApiError) as info:
        await reserve(ledger, child, "small", clock(), max_out=20)
    assert info.value.kind is ErrorKind.DAILY_CAP_HELD
    assert info.value.headers["x-should-retry"] == "true"
    await ledger.holds.settle(
        stream, now=clock(), credits_used=10, completion_tokens=10, outcome="completed"
    )
    assert await ledger.redis.exists(held_key) == 0
    assert await _int(ledger, cap_key) == 10
    assert (await reserve(ledger, child, "small", clock(), max_out=20)).amount == 20


async def test_concurrent_reserves_and_settles_keep_the_counters_exact(
    ledger: Ledgers, clock: Clock
) -> None:
    """Money rule 5 under concurrency: settled spend never passes the cap; the cap counter
    ends at the settled spend and the held counter at nothing."""
    await account(ledger, "acct_A", purchased=1_000_000)
    ident = await key(ledger, "acct_A", "k1", cap=120)
    rng = random.Random(44)
    settled: list[int] = []
    kinds: list[ScriptStatus] = []

    async def one(n: int) -> None:
        for attempt in range(4):
            got = await _default_cap_request(ledger, ident, f"r{n}-{attempt}", clock())
            if isinstance(got, Hold):
                await asyncio.sleep(0)
                used = rng.randint(1, got.amount)
                outcome = rng.choice(["completed", "client_disconnect", "released"])
                done = await ledger.holds.settle(
                    got, now=clock(), credits_used=used, completion_tokens=used, outcome=outcome
                )
                settled.append(done.credits_used)
                return
            assert isinstance(got, Refusal)
            kinds.append(got.status)

    await asyncio.gather(*(one(n) for n in range(60)))
    cap_key, held_key = _counters(ledger, ident, clock())
    assert sum(settled) == await _int(ledger, cap_key) <= 120
    assert await ledger.redis.exists(held_key) == 0
    assert set(kinds) <= {ScriptStatus.DAILY_CAP_HELD, ScriptStatus.DAILY_CAP_EXCEEDED}
    if sum(settled) + 1 <= 120:  # room was left: nobody was told to stop for the day
        assert ScriptStatus.DAILY_CAP_EXCEEDED not in kinds
