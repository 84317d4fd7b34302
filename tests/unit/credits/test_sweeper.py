"""The sweeper refunds reservations of dead workers once, whoever sweeps."""

from __future__ import annotations

import asyncio

from app.core.metrics import METRICS, exposition
from app.credits.outcomes import ScriptStatus
from app.credits.sweeper import Sweeper
from tests.conftest import Clock
from tests.e2e.conftest import metric_samples
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, pools, reserve

MOVEMENTS = ("reserved", "settled", "refunded")
ALIAS = "svc-fast"  # the alias tests.support.scripts_helpers.reserve holds credits for


async def test_expired_reservations_are_refunded_exactly_once_by_racing_sweepers(
    ledger: Ledgers, clock: Clock
) -> None:
    holds = []
    for i in range(12):  # accounts land on different shards
        pid = f"acct_S{i}"
        await account(ledger, pid, purchased=100)
        ident = await key(ledger, pid, f"kid{i:09d}")
        holds.append(await reserve(ledger, ident, f"r{i}", clock(), deadline=clock() + 60))
    alive = holds[0]
    sweepers = [Sweeper(ledger.holds, interval_s=1, clock=clock) for _ in range(3)]

    assert await sweepers[0].sweep_once() == 0  # nothing is past its deadline yet
    clock.advance(30)
    assert (
        await ledger.holds.extend(alive, clock() + 60)
    ).status is ScriptStatus.OK  # a live stream's heartbeat
    clock.advance(31)
    counts = await asyncio.gather(*(s.sweep_once() for s in sweepers))
    assert sum(counts) == 11  # every dead reservation once; the extended one is left
    for i in range(1, 12):
        assert await pools(ledger, f"acct_S{i}") == (0, 100)  # all of the hold came back
    assert await pools(ledger, "acct_S0") == (0, 100 - alive.amount)
    for s in sweepers:
        assert await s.sweep_once() == 0
    clock.advance(60)
    assert await sweepers[1].sweep_once() == 1
    assert await pools(ledger, "acct_S0") == (0, 100)
    for shard in range(ledger.layout.shards):
        assert await ledger.redis.zcard(ledger.layout.reservations(shard)) == 0


async def test_a_settled_reservation_is_never_swept(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=100)
    ident = await key(ledger, "acct_A", "kidA00000000")
    hold = await reserve(ledger, ident, "r1", clock(), deadline=clock() + 10)
    await ledger.holds.settle(
        hold, now=clock(), credits_used=4, prompt_tokens=1, completion_tokens=4, outcome="completed"
    )
    clock.advance(11)
    assert await Sweeper(ledger.holds, interval_s=1, clock=clock).sweep_once() == 0
    assert await pools(ledger, "acct_A") == (0, 96)


async def test_ids_whose_hash_was_lost_do_not_hide_the_expired_behind_them(
    ledger: Ledgers, clock: Clock
) -> None:
    """A page of lost ids (an evicting Redis, a hand-deleted hash) is dropped from the
    deadline index, so the reservation after them is refunded by the next pass."""
    await account(ledger, "acct_A", purchased=100)
    ident = await key(ledger, "acct_A", "kidA00000000")
    hold = await reserve(ledger, ident, "r-real", clock(), deadline=clock() + 20)
    index = ledger.layout.reservations(hold.shard)
    await ledger.redis.zadd(index, {f"r-lost-{n}": clock() + 10 for n in range(3)})
    clock.advance(30)
    sweeper = Sweeper(ledger.holds, interval_s=1, clock=clock)
    assert await sweeper._expired(clock(), limit=3) == []  # a page of lost ids only
    assert await ledger.redis.zrange(index, 0, -1) == [b"r-real"]
    assert await sweeper.sweep_once() == 1
    assert await pools(ledger, "acct_A") == (0, 100)


async def _credit_totals() -> dict[tuple[str, str], float]:
    """``svc_credits_total`` of this process by (movement, environment), for the alias the
    reservations are made for (the swept ones' read back from Redis); and the sweeper's own
    ``svc_sweeper_refunded_credits_total`` by environment, as ("swept", environment)."""

    async def no_redis() -> None:
        return None

    samples = metric_samples((await exposition(METRICS, no_redis)).decode())
    totals = {
        (labels["movement"], labels["environment"]): value
        for (name, pairs), value in samples.items()
        if name == "svc_credits_total" and ("model", ALIAS) in pairs
        for labels in [dict(pairs)]
    }
    for (name, pairs), value in samples.items():
        if name == "svc_sweeper_refunded_credits_total":
            totals["swept", dict(pairs)["environment"]] = value
    return totals


async def test_swept_holds_are_counted_as_refunded_credits(ledger: Ledgers, clock: Clock) -> None:
    before = await _credit_totals()
    await account(ledger, "acct_M", purchased=100)
    swept = []
    for environment in ("live", "test"):
        ident = await key(ledger, "acct_M", f"kid{environment}00000", environment=environment)
        completed = await reserve(ledger, ident, f"done-{environment}", clock())
        abandoned = await reserve(ledger, ident, f"dead-{environment}", clock(), max_out=7)
        for hold in (completed, abandoned):
            METRICS.reserved(environment, ALIAS, hold.amount)  # as the chat route records it
        settled = await ledger.holds.settle(
            completed,
            now=clock(),
            credits_used=4,
            prompt_tokens=1,
            completion_tokens=4,
            outcome="completed",
        )
        METRICS.settled(
            "completed", environment, ALIAS, used=settled.credits_used, held=completed.amount
        )
        swept.append(abandoned.amount)
    clock.advance(61)  # past the deadlines: the abandoned holds' workers are gone

    assert await Sweeper(ledger.holds, interval_s=1, clock=clock).sweep_once() == 2

    after = await _credit_totals()
    moved = {
        (movement, environment): after.get((movement, environment), 0)
        - before.get((movement, environment), 0)
        for movement in (*MOVEMENTS, "swept")
        for environment in ("live", "test")
    }
    for environment, abandoned_amount in zip(("live", "test"), swept, strict=True):
        assert moved["reserved", environment] == 10 + abandoned_amount
        assert moved["settled", environment] == 4
        assert moved["refunded", environment] == 6 + abandoned_amount  # the swept hold too
        assert moved["swept", environment] == abandoned_amount
        assert (
            moved["reserved", environment]
            == moved["settled", environment] + moved["refunded", environment]
        )


async def test_open_reservations_are_counted_with_those_the_sweeper_is_owed(
    ledger: Ledgers, clock: Clock
) -> None:
    for i in range(4):  # accounts land on different shards
        pid = f"acct_O{i}"
        await account(ledger, pid, purchased=100)
        ident = await key(ledger, pid, f"kid{i:09d}")
        await reserve(ledger, ident, f"r{i}", clock(), deadline=clock() + 10 * (i + 1))
    counted = await ledger.holds.open_reservations(clock())
    assert counted.open == 4
    assert counted.past_deadline == 0
    clock.advance(25)  # two deadlines passed: 10 and 20 seconds on
    assert tuple(await ledger.holds.open_reservations(clock())) == (4, 2)
