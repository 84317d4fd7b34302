"""``svc admin inspect``'s report of one account, on both Redis flavours and SQLite."""

from __future__ import annotations

import pytest

from app.accounts.accounts import Accounts
from app.accounts.api_keys import ApiKeys
from app.accounts.bodies import KeyCreateRequest
from app.core.errors import ApiError, ErrorKind
from app.credits.outcomes import Identity
from app.ops.inspect import inspect_account
from app.store import Store
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import reserve


async def test_the_report_shows_pools_keys_caps_reservations_and_usage(
    store: Store, ledger: Ledgers, clock: Clock
) -> None:
    accounts = Accounts(store, ledger.money, clock=clock)
    api_keys = ApiKeys(store, ledger.keys, accounts, b"pepper", clock=clock)
    pid = await accounts.create_account()
    await accounts.grant_purchased(pid, 1000)
    capped = await api_keys.create_key(
        pid, KeyCreateRequest(name="a", environment="live", daily_cap_credits=300)
    )
    other = await api_keys.create_key(
        pid, KeyCreateRequest(name="b", environment="test", daily_cap_credits=None)
    )
    await api_keys.revoke_key(pid, other.id)
    shard = ledger.layout.shard(pid)
    ident = Identity(pid, capped.id.removeprefix("key_"), "live", shard)
    done = await reserve(ledger, ident, "r1", clock())
    await ledger.holds.settle(
        done, now=clock(), credits_used=4, prompt_tokens=2, completion_tokens=4, outcome="completed"
    )
    open_hold = await reserve(ledger, ident, "r2", clock(), deadline=clock() + 60)

    report = await inspect_account(ledger.redis, ledger.layout, store, pid, clock)
    assert (report.account_pid, report.shard) == (pid, shard)
    assert (report.earned, report.purchased) == (0, 1000 - 4 - open_hold.amount)
    states = {k.id: (k.status, k.daily_cap_credits, k.cap_used_today) for k in report.keys}
    assert states == {
        capped.id: ("active", 300, 4 + open_hold.amount),
        other.id: ("revoked", None, 0),
    }
    assert [(r.id, r.key_id, r.amount) for r in report.open_reservations] == [
        ("r2", capped.id, open_hold.amount)
    ]
    assert report.usage_today["live:credits"] == 4
    assert report.usage_total["live:requests"] == 1

    with pytest.raises(ApiError) as info:
        await inspect_account(ledger.redis, ledger.layout, store, "acct_nobody", clock)
    assert info.value.kind is ErrorKind.ACCOUNT_NOT_FOUND
