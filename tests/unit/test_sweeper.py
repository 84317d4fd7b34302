"""The sweeper refunds reservations of dead workers once, whoever sweeps."""

from __future__ import annotations

import asyncio

from app.ledger import Ledger
from app.sweeper import Sweeper
from tests.conftest import Clock
from tests.unit.scripts_helpers import account, key, pools, reserve


async def test_expired_reservations_are_refunded_exactly_once_by_racing_sweepers(
    ledger: Ledger, clock: Clock
) -> None:
    holds = []
    for i in range(12):  # accounts land on different shards
        pid = f"acct_S{i}"
        await account(ledger, pid, purchased=100)
        ident = await key(ledger, pid, f"kid{i:09d}")
        holds.append(await reserve(ledger, ident, f"r{i}", clock(), deadline=clock() + 60))
    alive = holds[0]
    sweepers = [Sweeper(ledger, interval_s=1, clock=clock) for _ in range(3)]

    assert await sweepers[0].sweep_once() == 0  # nothing is past its deadline yet
    clock.advance(30)
    assert await ledger.extend(alive, clock() + 60)  # a live stream's heartbeat
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
    for shard in range(ledger.keys.shards):
        assert await ledger.redis.zcard(ledger.keys.reservations(shard)) == 0


async def test_a_settled_reservation_is_never_swept(ledger: Ledger, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=100)
    ident = await key(ledger, "acct_A", "kidA00000000")
    hold = await reserve(ledger, ident, "r1", clock(), deadline=clock() + 10)
    await ledger.settle(
        hold, now=clock(), credits_used=4, prompt_tokens=1, completion_tokens=4, outcome="completed"
    )
    clock.advance(11)
    assert await Sweeper(ledger, interval_s=1, clock=clock).sweep_once() == 0
    assert await pools(ledger, "acct_A") == (0, 96)
