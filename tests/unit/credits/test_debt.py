"""Debt instead of negative pools (issue 45 item 2), at the scripts: take_back.lua takes the
purchased pool first, then the earned one, and owes the rest; every grant and every settle
that returns credits pays the debt first; a live key of an account in debt is refused
before anything is held. On fakeredis, the real Valkey and the real Cluster."""

from __future__ import annotations

import asyncio

import pytest

from app.core.errors import ApiError, ErrorKind
from app.credits.money import ledger_marker
from app.credits.outcomes import ScriptStatus
from app.store import GrantRecord
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, pools, reserve, snapshot

DAY = 86_400


async def _debt(ledger: Ledgers, pid: str) -> int:
    name = ledger.layout.account(ledger.layout.shard(pid), pid)
    return int(await ledger.redis.hget(name, "debt") or 0)


async def test_a_take_back_empties_purchased_then_earned_then_owes(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_a", purchased=30)
    await ledger.money.grant(
        "acct_a", pool="earned", credits=20, grant_id="e", now=clock(), earned_ttl_s=DAY
    )
    taken = await ledger.money.take_back("acct_a", credits=45, entry_id="r1", now=clock())
    assert (taken.status, taken.taken, taken.owed) == (ScriptStatus.OK, 45, 0)
    assert await pools(ledger, "acct_a") == (5, 0)  # purchased first, then earned
    taken = await ledger.money.take_back("acct_a", credits=12, entry_id="r2", now=clock())
    assert (taken.taken, taken.owed, taken.balance.debt) == (5, 7, 7)
    assert await pools(ledger, "acct_a") == (0, 0)  # never below 0
    assert await _debt(ledger, "acct_a") == 7


async def test_a_take_back_applies_once_per_entry_and_answers_the_first_split(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_a", purchased=10)
    first = await ledger.money.take_back("acct_a", credits=25, entry_id="r", now=clock())
    clock.advance(5)
    again = await asyncio.gather(
        *(
            ledger.money.take_back("acct_a", credits=25, entry_id="r", now=clock())
            for _ in range(20)
        )
    )
    assert {a.status for a in again} == {ScriptStatus.DUPLICATE}
    assert {(a.taken, a.owed, a.applied_at) for a in again} == {(10, 15, first.applied_at)}
    assert await _debt(ledger, "acct_a") == 15


async def test_a_take_back_of_a_missing_account_changes_nothing(
    ledger: Ledgers, clock: Clock
) -> None:
    before = await snapshot(ledger)
    taken = await ledger.money.take_back("acct_gone", credits=5, entry_id="r", now=clock())
    assert taken.status is ScriptStatus.ACCOUNT_MISSING
    assert await snapshot(ledger) == before


async def test_a_grant_pays_the_debt_first(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_a")
    await ledger.money.take_back("acct_a", credits=40, entry_id="r", now=clock())
    small = await ledger.money.grant(
        "acct_a", pool="purchased", credits=25, grant_id="g1", now=clock()
    )
    assert (small.paid, small.balance.debt, small.balance.purchased) == (25, 15, 0)
    big = await ledger.money.grant(
        "acct_a", pool="earned", credits=100, grant_id="g2", now=clock(), earned_ttl_s=DAY
    )
    assert (big.paid, big.balance.debt, big.balance.earned) == (15, 0, 85)
    again = await ledger.money.grant(
        "acct_a", pool="earned", credits=100, grant_id="g2", now=clock(), earned_ttl_s=DAY
    )
    assert (again.status, again.paid) == (ScriptStatus.DUPLICATE, 15)  # the first call's
    assert await pools(ledger, "acct_a") == (85, 0)


async def test_a_live_key_in_debt_is_refused_before_anything_is_held(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_a", purchased=5)
    live = await key(ledger, "acct_a", "k1")
    test = await key(ledger, "acct_a", "k2", environment="test")
    await ledger.money.take_back("acct_a", credits=8, entry_id="r", now=clock())
    before = await snapshot(ledger)
    with pytest.raises(ApiError) as refused:
        await reserve(ledger, live, "rsv1", clock())
    assert refused.value.kind is ErrorKind.ACCOUNT_IN_DEBT
    assert "3 credits" in refused.value.message
    assert "purchase" in refused.value.message
    assert await snapshot(ledger) == before  # nothing held, counted or logged
    await reserve(ledger, test, "rsv2", clock())  # test keys never touch the pools
    await ledger.money.grant("acct_a", pool="purchased", credits=10, grant_id="g", now=clock())
    await reserve(ledger, live, "rsv3", clock(), max_out=7)  # paid: served again


async def test_credits_a_settle_returns_pay_a_debt_made_while_they_were_held(
    ledger: Ledgers, clock: Clock
) -> None:
    """A refund lands while a request holds credits: the pools are short by the hold, so
    the refund leaves a debt; what the request did not use comes back and pays it."""
    await account(ledger, "acct_a", purchased=100)
    ident = await key(ledger, "acct_a", "k1")
    hold = await reserve(ledger, ident, "rsv", clock(), max_out=60)  # 60 held, 40 left
    await ledger.money.take_back("acct_a", credits=70, entry_id="r", now=clock())
    assert await _debt(ledger, "acct_a") == 30
    await ledger.holds.settle(
        hold, now=clock(), credits_used=20, completion_tokens=20, outcome="completed"
    )
    assert await pools(ledger, "acct_a") == (0, 10)  # 40 back: 30 paid the debt
    assert await _debt(ledger, "acct_a") == 0


async def test_concurrent_take_backs_and_grants_never_lose_a_credit(
    ledger: Ledgers, clock: Clock
) -> None:
    """Pools less debt moves by exactly what each entry asks, whatever the order."""
    await account(ledger, "acct_a", purchased=50)
    moves = [("take", i, 7) for i in range(30)] + [("grant", i, 5) for i in range(30)]

    async def one(kind: str, i: int, credits: int) -> None:
        if kind == "take":
            await ledger.money.take_back("acct_a", credits=credits, entry_id=f"t{i}", now=clock())
        else:
            await ledger.money.grant(
                "acct_a", pool="purchased", credits=credits, grant_id=f"g{i}", now=clock()
            )

    gate = asyncio.Semaphore(8)  # the test client's connection pool is small

    async def bounded(kind: str, i: int, credits: int) -> None:
        async with gate:
            await one(kind, i, credits)

    await asyncio.gather(*(bounded(*m) for m in moves + moves[::-1]))  # each twice
    earned, purchased = await pools(ledger, "acct_a")
    debt = await _debt(ledger, "acct_a")
    assert earned + purchased - debt == 50 - 30 * 7 + 30 * 5
    assert min(earned, purchased, debt) >= 0
    assert purchased == 0 or debt == 0


def test_the_marker_a_rebuild_restores_is_the_one_the_scripts_write() -> None:
    base = {"account_pid": "acct_a", "pool": "purchased", "source": "operator"}
    grant = GrantRecord(
        grant_id="g",
        credits=70,
        debt_change=-30,
        created_at=5,
        applied_at=9,
        reference=None,
        **base,
    )
    take = GrantRecord(
        grant_id="t",
        credits=-10,
        debt_change=15,
        created_at=5,
        applied_at=9,
        reference=None,
        kind="refund",
        **base,
    )
    assert (ledger_marker(grant), ledger_marker(take)) == ("9:30", "9:10:15")
