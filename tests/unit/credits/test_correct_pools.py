"""correct_pools.lua (rebuild-redis --force): the difference between an account's pools and
its ledger goes to (or comes from) each pool by its part, never below 0, and never opens a
hash Redis lacks."""

from __future__ import annotations

from app.credits.outcomes import ScriptStatus
from app.kv.fields import AccountField
from tests.conftest import Clock
from tests.support.ledgers import Ledgers

DAY = 86_400


async def _pools(ledger: Ledgers, pid: str) -> tuple[int, int, int]:
    name = ledger.layout.account(ledger.layout.shard(pid), pid)
    fields = [AccountField.EARNED, AccountField.EARNED_EXP, AccountField.PURCHASED]
    earned, exp, purchased = await ledger.redis.hmget(name, fields)
    return int(earned), int(exp), int(purchased)


async def test_adding_gives_each_pool_its_part_and_the_later_expiry(
    ledger: Ledgers, clock: Clock
) -> None:
    now = int(clock())
    await ledger.money.open_account("acct_A", earned=10, earned_exp=now + DAY, purchased=5)
    done = await ledger.money.correct_pools(
        "acct_A", 9_997 + 500, earned_part=500, earned_exp=now + 2 * DAY, now=now
    )
    assert done.status is ScriptStatus.OK
    assert await _pools(ledger, "acct_A") == (510, now + 2 * DAY, 10_002)
    # an earlier expiry by the ledger does not shorten the pool's
    await ledger.money.correct_pools("acct_A", 1, earned_part=1, earned_exp=now + 60, now=now)
    assert await _pools(ledger, "acct_A") == (511, now + 2 * DAY, 10_002)


async def test_taking_falls_back_on_the_other_pool_and_stops_at_zero(
    ledger: Ledgers, clock: Clock
) -> None:
    now = int(clock())
    await ledger.money.open_account("acct_T", earned=30, earned_exp=now + DAY, purchased=100)
    # 50 of the 60 the earned pool's, but it holds 30 now (spent since the read): the
    # other 30 from purchased
    await ledger.money.correct_pools("acct_T", -60, earned_part=50, earned_exp=0, now=now)
    assert await _pools(ledger, "acct_T") == (0, 0, 70)
    await ledger.money.correct_pools("acct_T", -500, earned_part=0, earned_exp=0, now=now)
    assert await _pools(ledger, "acct_T") == (0, 0, 0)


async def test_an_account_redis_lacks_is_not_opened(ledger: Ledgers, clock: Clock) -> None:
    done = await ledger.money.correct_pools("acct_X", 100, earned_part=0, earned_exp=0, now=clock())
    assert done.status is ScriptStatus.ACCOUNT_MISSING
    assert not await ledger.redis.exists(
        ledger.layout.account(ledger.layout.shard("acct_X"), "acct_X")
    )


async def test_adding_to_an_expired_earned_pool_does_not_revive_it(
    ledger: Ledgers, clock: Clock
) -> None:
    """Earned 500 past its expiry, not yet zeroed: an add lapses it first (as grant.lua
    does), bumps its generation and records the lapse in the events stream, in the same
    call; only the added part is earned after."""
    now = int(clock())
    shard = ledger.layout.shard("acct_E")
    await ledger.money.open_account("acct_E", earned=500, earned_exp=now - 10, purchased=5)
    done = await ledger.money.correct_pools(
        "acct_E", 300, earned_part=200, earned_exp=now + DAY, now=now
    )
    assert done.status is ScriptStatus.OK
    assert await _pools(ledger, "acct_E") == (200, now + DAY, 105)
    name = ledger.layout.account(shard, "acct_E")
    assert await ledger.redis.hget(name, AccountField.EGEN) == b"1"
    (event,) = await ledger.redis.xrange(ledger.layout.events(shard))
    fields = {k.decode(): v.decode() for k, v in event[1].items()}
    assert fields == {"kind": "expire", "acct": "acct_E", "credits": "500", "ts": str(now)}
