from app.ledger import Identity, Ledger, ScriptStatus
from tests.conftest import Clock


async def test_reserve_settle_round_trip(ledger: Ledger, clock: Clock) -> None:
    pid, kid = "acct_A", "K" * 12
    ident = Identity(pid, kid, "live", ledger.keys.shard(pid))
    assert await ledger.open_account(pid, purchased=1000)
    assert await ledger.put_key(ident, status="active", daily_cap=None, name="k")
    hold = await ledger.reserve(
        ident,
        rid="r1",
        now=clock(),
        prompt_units=1000,
        output_price=15,
        max_out=100,
        min_out=16,
        deadline=clock() + 60,
        alias="svc-fast",
        requested="svc-fast",
    )
    assert hold.amount == 3  # ceil((1000 + 1500) / 1000)
    assert hold.balance == 997
    done = await ledger.settle(
        hold,
        now=clock(),
        credits_used=2,
        prompt_tokens=200,
        completion_tokens=40,
        outcome="completed",
    )
    assert done.status is ScriptStatus.OK
    assert (done.credits_used, done.balance) == (2, 998)
    again = await ledger.settle(
        hold,
        now=clock(),
        credits_used=2,
        prompt_tokens=200,
        completion_tokens=40,
        outcome="completed",
    )
    assert again.status is ScriptStatus.NOT_FOUND
