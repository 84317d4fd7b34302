"""The scripts' notices on every Redis flavour: a balance that falls below the account's
threshold is told once per fall (settle), however many settle below it; a key's cap
counter crossing 50, 80 and 100 % is told by the reserve that crosses it."""

from __future__ import annotations

import asyncio

from app.core.clock import day_tag, utc_day
from app.credits.outcomes import ScriptStatus
from app.kv.stream_events import CapEvent, LowBalanceEvent, parse_event
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, reserve


async def _notices(ledger: Ledgers, shard: int) -> list[object]:
    entries = await ledger.redis.xrange(ledger.layout.events(shard))
    found = [parse_event(i, f) for i, f in entries]
    return [e for e in found if isinstance(e, LowBalanceEvent | CapEvent)]


async def _spend(ledger: Ledgers, ident: object, rid: str, clock: Clock, used: int) -> int:
    hold = await reserve(ledger, ident, rid, clock(), max_out=used)  # type: ignore[arg-type]
    settled = await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=used,
        prompt_tokens=1,
        completion_tokens=used,
        outcome="completed",
    )
    return settled.balance


async def test_a_fall_below_the_threshold_is_told_once_per_fall(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_L", purchased=100)
    ident = await key(ledger, "acct_L", "kidL00000000")
    assert (await ledger.money.set_low_balance("acct_L", 50, clock())).status is ScriptStatus.OK
    assert await _spend(ledger, ident, "r1", clock, 40) == 60
    assert await _notices(ledger, ident.shard) == []
    # ten settles at once take it below: one of them tells
    await asyncio.gather(*(_spend(ledger, ident, f"c{i}", clock, 3) for i in range(10)))
    (told,) = await _notices(ledger, ident.shard)
    assert isinstance(told, LowBalanceEvent)
    assert (told.low, told.balance < 50) == (50, True)
    await _spend(ledger, ident, "r2", clock, 1)  # still below: nothing more
    assert len(await _notices(ledger, ident.shard)) == 1
    await ledger.money.grant("acct_L", pool="purchased", credits=100, grant_id="g1", now=clock())
    await _spend(ledger, ident, "r3", clock, 5)  # above again
    assert len(await _notices(ledger, ident.shard)) == 1
    await _spend(ledger, ident, "r4", clock, 80)  # a new fall: told again
    assert len(await _notices(ledger, ident.shard)) == 2


async def test_setting_a_threshold_under_water_is_not_a_fall(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_M", purchased=30)
    ident = await key(ledger, "acct_M", "kidM00000000")
    await ledger.money.set_low_balance("acct_M", 50, clock())  # 30 < 50 already
    await _spend(ledger, ident, "r1", clock, 5)
    assert await _notices(ledger, ident.shard) == []
    await ledger.money.set_low_balance("acct_M", None, clock())  # cleared: nothing is told
    await _spend(ledger, ident, "r2", clock, 5)
    assert await _notices(ledger, ident.shard) == []
    assert (await ledger.money.set_low_balance("acct_nobody", 5, clock())).status is (
        ScriptStatus.ACCOUNT_MISSING
    )


async def test_a_cap_counter_crossing_each_level_is_told_by_the_reserve(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_C", purchased=10_000)
    ident = await key(ledger, "acct_C", "kidC00000000", cap=100)
    await reserve(ledger, ident, "r1", clock(), max_out=40)  # 40 %
    assert await _notices(ledger, ident.shard) == []
    await reserve(ledger, ident, "r2", clock(), max_out=45)  # 85 %: 50 and 80 at once
    await reserve(ledger, ident, "r3", clock(), max_out=15)  # 100 %
    told = await _notices(ledger, ident.shard)
    assert [(e.level, e.spent, e.cap) for e in told] == [
        (50, 85, 100),
        (80, 85, 100),
        (100, 100, 100),
    ]  # type: ignore[union-attr]
    assert {e.counter for e in told} == {
        ledger.layout.cap(ident.shard, "kidC00000000", day_tag(utc_day(clock())))
    }  # type: ignore[union-attr]
