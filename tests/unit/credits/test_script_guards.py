"""Every script checks every argument before its first write (lib/checks.lua): a hostile
ARGV raises an error reply and leaves Redis exactly as it was. Also: a reserve that reaches
Redis after its caller gave up holds nothing, and earned credits that expire while held
lapse whatever happens to the pool meanwhile."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ResponseError

from app.core.clock import day_tag, utc_day
from app.core.errors import ApiError, ErrorKind
from app.core.metrics import METRICS
from app.credits.outcomes import Hold, Identity, ScriptStatus, Settlement
from app.credits.scripts import RedisClock
from app.credits.sweeper import Sweeper
from app.kv.client import REDIS_TIMEOUT, RedisClient
from app.kv.layout import KeySpace
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, pools, reserve, snapshot

DAY = 86_400
HOSTILE_COUNTS = ["-5", "1e30", "1000000000000000", "1.5", "", "abc", " 7", "0x10"]


def _calls(ledger: Ledgers, ident: Identity, now: int) -> dict[str, tuple[list[str], list[Any]]]:
    """A valid (KEYS, ARGV) for each script against the fixture's account, key and open
    reservation ``r0``; each test breaks one argument of one call."""
    ks, shard, pid, kid = ledger.layout, ident.shard, ident.pid, ident.kid
    day = utc_day(now)
    tag = day_tag(day)
    return {
        "reserve": (
            [
                ks.account(shard, pid),
                ks.api_key(shard, kid),
                ks.cap(shard, kid, tag),
                ks.reservation(shard, "r1"),
                ks.reservations(shard),
                ks.events(shard),
                ks.rate(shard, kid),
                ks.cap_held(ks.cap(shard, kid, tag)),
                ks.idempotency(shard, pid, "live", "d" * 64),
            ],
            [
                now,
                "r1",
                pid,
                kid,
                0,
                1000,
                10,
                10,
                now + 60,
                100,
                "svc-fast",
                "svc-fast",
                day,
                now * 1000,
                "svc-fast",
                0,
                "responses",
                25,
                "f" * 64,
                86_400,
            ],
        ),
        "settle": (
            [
                ks.reservation(shard, "r0"),
                ks.reservations(shard),
                ks.account(shard, pid),
                ks.cap(shard, kid, tag),
                ks.usage_day(shard, pid, tag),
                ks.usage_total(shard, pid),
                ks.events(shard),
                ks.cap_held(ks.cap(shard, kid, tag)),
                ks.idempotency(shard, pid, "live", "d" * 64),
            ],
            [
                now,
                "r0",
                3,
                10,
                3,
                "completed",
                0,
                100,
                f"chatcmpl-svc-1 {now} 5 9 upstream",
                0,
                1,
                12,
                15,
                2,
                4,
                1,
                1,
                "body",
                "a",
                "b",
                "c",
            ],
        ),
        "extend": ([ks.reservation(shard, "r0"), ks.reservations(shard)], ["r0", now + 600]),
        "grant": (
            [
                ks.account(shard, pid),
                ks.grant_marker(shard, "g9"),
                ks.spotlight(shard, pid, tag),
                ks.events(shard),
            ],
            [now, "earned", 100, 30 * DAY, 5, 100, 100, pid],
        ),
        "open_account": ([ks.account(shard, "acct_new")], [0, 0, 100, "active"]),
        "correct_pools": (
            [ks.account(shard, pid), ks.events(shard)],
            ["take", 100, 40, now + DAY, now, pid],
        ),
        "account_status": ([ks.account(shard, pid)], ["disabled"]),
        "expire_earned": ([ks.account(shard, pid), ks.events(shard)], [now, pid]),
        "low_balance": ([ks.account(shard, pid)], [now, 500]),
        "put_key": (
            [ks.api_key(shard, "knew")],
            [pid, "active", "live", -1, "name", now + 60, " svc-fast ", 600, 0],
        ),
        "revoke_key": ([ks.api_key(shard, kid)], [pid, "live", -1, "name", 0, "*", 0, 40]),
        "update_key": (
            [ks.api_key(shard, kid)],
            [pid, "active", "live", 50, "renamed", 0, " svc-code svc-fast ", 5, 12],
        ),
        "balance": ([ks.api_key(shard, kid), ks.account(shard, pid)], [now, pid]),
        "rate_start": ([ks.api_key(shard, kid), ks.rate(shard, kid)], [now * 1000]),
    }


NUMERIC = {
    "reserve": [0, 4, 5, 6, 7, 8, 9, 13, 15, 17, 19],
    "settle": [0, 2, 3, 4, 7, 9, 10, 11, 12, 13, 14, 15, 16],
    "extend": [1],
    "grant": [0, 2, 3, 4, 5, 6],
    "open_account": [0, 1, 2],
    "correct_pools": [1, 2, 3, 4],
    "expire_earned": [0],
    "low_balance": [0, 1],
    "put_key": [3, 5, 7, 8],
    "revoke_key": [2, 4, 6, 7],
    "update_key": [3, 5, 7, 8],
    "balance": [0],
    "rate_start": [0],
}
WORDS = {  # arguments from a fixed set, and a wrong value for each
    "reserve": [(16, "completions"), (17, "")],
    "settle": [(5, "paid"), (6, "2"), (8, "x" * 4097), (17, "maybe")],
    "grant": [(1, "gold")],
    "open_account": [(3, "frozen")],
    "correct_pools": [(0, "set"), (1, "0"), (2, "101")],
    "account_status": [(0, "paused"), (0, "")],
    "put_key": [(1, "deleted"), (2, "prod"), (6, "svc-fast")],
    "revoke_key": [(1, "prod"), (5, "all")],
    "update_key": [(1, "deleted"), (2, "prod"), (6, " svc-fast\n")],
}
CASES = [
    (name, i, bad)
    for name, indexes in NUMERIC.items()
    for i in indexes
    for bad in HOSTILE_COUNTS
    if not (
        bad == "-5" and name in ("put_key", "revoke_key", "update_key")
    )  # -1 is "no cap"; -5 is not
] + [(name, i, bad) for name, words in WORDS.items() for i, bad in words]


async def _fixture(ledger: Ledgers, now: int) -> Identity:
    await account(ledger, "acct_G", purchased=1_000)
    ident = await key(ledger, "acct_G", "kidG00000000", cap=500)
    await reserve(ledger, ident, "r0", now)
    return ident


@pytest.mark.parametrize(("script", "index", "bad"), CASES)
async def test_a_hostile_argument_changes_nothing(
    redis: RedisClient, ledger: Ledgers, clock: Clock, script: str, index: int, bad: str
) -> None:
    now = int(clock())
    ident = await _fixture(ledger, now)
    keys, args = _calls(ledger, ident, now)[script]
    await ledger.scripts.run(script, keys, args)  # the valid call works (then undo it: fresh state)
    await redis.flushall()
    ident = await _fixture(ledger, now)
    before = await snapshot(ledger)
    args = list(args)
    args[index] = bad
    with pytest.raises(ResponseError, match="svc bad argument"):
        await ledger.scripts.run(script, keys, args)
    assert await snapshot(ledger) == before


async def test_a_reserve_redis_runs_after_its_caller_gave_up_holds_nothing(
    redis: RedisClient, keyspace: KeySpace, clock: Clock
) -> None:
    """Redis paused (or a command stuck in a buffer): the caller answered 503 after its
    timeout; the reserve that runs later must not hold credits nobody will settle."""
    late = RedisClock()
    late.offset_s = -10.0  # as if Redis ran the command 10 s after the caller sent it
    ledger = Ledgers(
        redis,
        keyspace,
        cap_ttl_s=100,
        usage_ttl_s=100,
        command_timeout_s=2.0,
        redis_clock=late,
    )
    await account(ledger, "acct_L", purchased=1_000)
    ident = await key(ledger, "acct_L", "kidL00000000")
    before = await snapshot(ledger)
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r1", clock())
    assert info.value.kind is ErrorKind.SERVICE_UNAVAILABLE
    assert await snapshot(ledger) == before
    await ledger.holds.sync_clock()  # measured: within the timeout again
    hold = await reserve(ledger, ident, "r1", clock())
    assert hold.amount == 10


@pytest.mark.parametrize(("runs_after_s", "held"), [(1.7, True), (1.9, False)])
async def test_a_reserve_run_in_the_last_tenth_of_its_callers_wait_holds_nothing(
    redis: RedisClient, keyspace: KeySpace, clock: Clock, runs_after_s: float, held: bool
) -> None:
    """The caller waits 2 s; a reserve Redis runs 1.9 s after it was sent could still hold,
    yet its reply, behind a backlog, reach a caller that has gone: the last tenth of the
    wait is the reply's, and a reserve run in it gives up."""
    late = RedisClock()
    late.offset_s = -runs_after_s
    ledger = Ledgers(
        redis, keyspace, cap_ttl_s=100, usage_ttl_s=100, command_timeout_s=2.0, redis_clock=late
    )
    await account(ledger, "acct_M", purchased=1_000)
    ident = await key(ledger, "acct_M", "kidM00000000")
    before = await snapshot(ledger)
    if held:
        assert (await reserve(ledger, ident, "r1", clock())).amount == 10
        return
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r1", clock())
    assert info.value.kind is ErrorKind.SERVICE_UNAVAILABLE
    assert await snapshot(ledger) == before


async def test_an_unanswered_reserve_is_released_by_its_id(ledger: Ledgers, clock: Clock) -> None:
    """A reserve whose reply came too late may have held credits after all: releasing it
    by its id gives everything back (balance, cap, reservation); for a reserve that never
    ran it changes nothing."""
    await account(ledger, "acct_U", purchased=1_000)
    ident = await key(ledger, "acct_U", "kidU00000000")
    before = await snapshot(ledger)
    reserved_at = clock()
    await reserve(ledger, ident, "r1", reserved_at)
    assert await snapshot(ledger) != before
    clock.advance(3)
    released = await ledger.holds.release_unanswered(
        ident, "r1", reserved_at=reserved_at, now=clock()
    )
    assert (released.status, released.credits_used) == (ScriptStatus.OK, 0)
    after = await _without_empty_caps(ledger)
    assert after == before  # the day's cap counter stays, at 0
    never = await ledger.holds.release_unanswered(ident, "r2", reserved_at=reserved_at, now=clock())
    assert never.status is ScriptStatus.NOT_FOUND
    assert await _without_empty_caps(ledger) == before


async def _without_empty_caps(ledger: Ledgers) -> Any:
    """The state, less the day's cap counters at 0 and the keys' last use (a reserve that
    ran did use the key, whether or not its reply came back in time)."""
    state = await snapshot(ledger)
    for name, value in state.items():
        if b":key:" in name:
            value.pop(b"used", None)
    return {k: v for k, v in state.items() if not (b":cap:" in k and v == b"0")}


async def _reward(ledger: Ledgers, pid: str, grant_id: str, now: float) -> None:
    """A spotlight-sized earned grant: 5,000 credits, the pool rolled to now + 30 days."""
    status, _, _, _paid = await ledger.money.grant(
        pid, pool="earned", credits=5_000, grant_id=grant_id, now=now, earned_ttl_s=30 * DAY
    )
    assert status is ScriptStatus.OK


async def _settle_one_credit(ledger: Ledgers, hold: Hold, now: float) -> Settlement:
    return await ledger.holds.settle(
        hold, now=now, credits_used=1, prompt_tokens=1, completion_tokens=1, outcome="completed"
    )


async def test_earned_credits_that_expire_while_held_lapse(ledger: Ledgers, clock: Clock) -> None:
    """Reward 5,000, hold 1,000, 31 days, a new reward, settle 1: the 999 unused held
    credits belonged to the expired pool and lapse (they used to rejoin the new pool)."""
    await account(ledger, "acct_E")
    ident = await key(ledger, "acct_E", "kidE00000000")
    await _reward(ledger, "acct_E", "g1", clock())
    hold = await reserve(ledger, ident, "r1", clock(), max_out=1_000)
    assert hold.amount == 1_000
    clock.advance(31 * DAY)
    await _reward(ledger, "acct_E", "g2", clock())
    done = await _settle_one_credit(ledger, hold, clock())
    assert (done.status, done.credits_used, done.balance) == (ScriptStatus.OK, 1, 5_000)
    assert await pools(ledger, "acct_E") == (5_000, 0)
    entries = await ledger.redis.xrange(ledger.layout.events(ident.shard))
    lapsed = [int(f[b"credits"]) for _, f in entries if f.get(b"kind") == b"expire"]
    assert sorted(lapsed) == [999, 4_000]  # granted 10,000 = 5,000 + 1 used + 4,999 lapsed


async def test_a_pool_extended_before_it_expired_keeps_the_held_credits(
    ledger: Ledgers, clock: Clock
) -> None:
    """Rolling expiry: a reward while the pool is alive extends it, held credits included."""
    await account(ledger, "acct_X")
    ident = await key(ledger, "acct_X", "kidX00000000")
    await _reward(ledger, "acct_X", "g1", clock())
    hold = await reserve(ledger, ident, "r1", clock(), max_out=1_000)
    clock.advance(29 * DAY)
    await _reward(ledger, "acct_X", "g2", clock())
    clock.advance(2 * DAY)  # past the first expiry, not the rolled one
    await _settle_one_credit(ledger, hold, clock())
    assert await pools(ledger, "acct_X") == (9_999, 0)


async def test_a_settle_redis_runs_after_its_caller_gave_up_changes_nothing(
    redis: RedisClient, keyspace: KeySpace, clock: Clock
) -> None:
    """Issue 30, item 2: Redis stalled as a stream ended, so its settle timed out and the
    client was told nothing was charged. The settle that Redis runs when it resumes must
    charge nothing; the sweeper then refunds the hold whole, and the metrics count it."""
    on_time = Ledgers(redis, keyspace, cap_ttl_s=100, usage_ttl_s=100, command_timeout_s=2.0)
    await account(on_time, "acct_G", purchased=1_000)
    ident = await key(on_time, "acct_G", "kidG00000000")
    hold = await reserve(on_time, ident, "r1", clock())
    assert hold.amount == 10
    late = RedisClock()
    late.offset_s = -10.0  # as if Redis ran the settle 10 s after the caller sent it
    stalled = Ledgers(
        redis, keyspace, cap_ttl_s=100, usage_ttl_s=100, command_timeout_s=2.0, redis_clock=late
    )
    before = await snapshot(stalled)
    with pytest.raises(REDIS_TIMEOUT):  # as a reply that came too late
        await stalled.holds.settle(
            hold,
            now=clock(),
            credits_used=4,
            prompt_tokens=3,
            completion_tokens=3,
            outcome="completed",
        )
    assert await snapshot(stalled) == before  # nothing charged, nothing counted
    refunded = METRICS.credits.labels("refunded", "live", "svc-fast")._value.get()
    clock.advance(3_600)  # past the reservation's deadline
    assert await Sweeper(on_time.holds, interval_s=1, clock=clock).sweep_once() == 1
    assert await pools(on_time, "acct_G") == (0, 1_000)
    assert METRICS.credits.labels("refunded", "live", "svc-fast")._value.get() - refunded == 10
