"""Spotlight rewards on a real SQLite store and both Redis flavours, with a moving clock."""

from __future__ import annotations

import pytest

from app.accounts.accounts import Accounts
from app.accounts.rewards import Spotlights
from app.core.errors import ApiError, ErrorKind, StoreError
from app.credits.outcomes import Balance
from app.kv.fields import ACCOUNT_DISABLED
from app.store import GrantRecord, Store, WebhookRecord
from tests.conftest import Clock
from tests.support.ledgers import Ledgers

DAY = 86_400


@pytest.fixture
async def pid(store: Store, ledger: Ledgers, clock: Clock) -> str:
    return await Accounts(store, ledger.money, clock=clock).create_account()


def _spotlights(store: Store, ledger: Ledgers, clock: Clock) -> Spotlights:
    return Spotlights(store, ledger.money, credits=5000, daily_limit=5, expiry_days=30, clock=clock)


async def test_a_reward_grants_earned_credits_and_rolls_the_expiry(
    store: Store, ledger: Ledgers, clock: Clock, pid: str
) -> None:
    spotlights = _spotlights(store, ledger, clock)
    first = await spotlights.reward(pid, "view-1")
    assert (first.object, first.credits, first.view_id, first.account_pid) == (
        "spotlight_reward",
        5000,
        "view-1",
        pid,
    )
    balance = await ledger.money.account_balance(pid, clock())
    assert balance is not None
    assert (balance.earned, balance.earned_exp) == (5000, int(clock()) + 30 * DAY)
    clock.advance(10 * DAY)
    await spotlights.reward(pid, "view-2")
    balance = await ledger.money.account_balance(pid, clock())
    assert balance is not None
    assert (balance.earned, balance.earned_exp) == (10_000, int(clock()) + 30 * DAY)  # rolled
    grants = await store.list_grants(pid)
    assert [(g.pool, g.credits, g.source, g.reference) for g in grants] == [
        ("earned", 5000, "operator", "view-1"),
        ("earned", 5000, "operator", "view-2"),
    ]


async def test_a_repeated_view_answers_the_same_and_grants_nothing(
    store: Store, ledger: Ledgers, clock: Clock, pid: str
) -> None:
    spotlights = _spotlights(store, ledger, clock)
    first = await spotlights.reward(pid, "view-1")
    clock.advance(3600)
    assert await spotlights.reward(pid, "view-1") == first
    balance = await ledger.money.account_balance(pid, clock())
    assert balance is not None
    assert balance.earned == 5000
    assert len(await store.list_grants(pid)) == 1


async def test_five_a_day_then_429_until_utc_midnight(
    store: Store, ledger: Ledgers, clock: Clock, pid: str
) -> None:
    spotlights = _spotlights(store, ledger, clock)
    for i in range(5):
        await spotlights.reward(pid, f"v{i}")
    with pytest.raises(ApiError) as info:
        await spotlights.reward(pid, "v5")
    assert info.value.kind is ErrorKind.SPOTLIGHT_LIMIT
    assert info.value.status == 429
    assert info.value.headers["x-should-retry"] == "false"
    assert int(info.value.headers["retry-after"]) == DAY - int(clock()) % DAY
    balance = await ledger.money.account_balance(pid, clock())
    assert balance is not None
    assert balance.earned == 25_000
    assert await spotlights.reward(pid, "v1") is not None  # a repeat is still answered
    clock.advance(DAY - int(clock()) % DAY)  # 00:00 UTC
    await spotlights.reward(pid, "v5")
    balance = await ledger.money.account_balance(pid, clock())
    assert balance is not None
    assert balance.earned == 30_000


async def test_the_earned_pool_expires_at_the_exact_second(
    store: Store, ledger: Ledgers, clock: Clock, pid: str
) -> None:
    await _spotlights(store, ledger, clock).reward(pid, "v")
    clock.advance(30 * DAY - 1)
    balance = await ledger.money.account_balance(pid, clock())
    assert balance is not None
    assert balance.earned == 5000
    clock.advance(1)
    balance = await ledger.money.account_balance(pid, clock())
    assert balance is not None
    assert (balance.earned, balance.earned_exp) == (0, 0)


async def test_unknown_account_and_bad_view_ids(
    store: Store, ledger: Ledgers, clock: Clock, pid: str
) -> None:
    spotlights = _spotlights(store, ledger, clock)
    with pytest.raises(ApiError) as info:
        await spotlights.reward("acct_nobody", "v")
    assert info.value.kind is ErrorKind.ACCOUNT_NOT_FOUND
    for bad in ("", "x" * 201, "a\nb"):
        with pytest.raises(ApiError) as info:
            await spotlights.reward(pid, bad)
        assert info.value.param == "view_id"
    assert await store.list_grants(pid) == []


async def test_a_store_failure_changes_nothing_and_the_retry_rewards_once(
    store: Store, ledger: Ledgers, clock: Clock, pid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reward's ledger entry is written before Redis changes (issue 45): a store that
    fails refuses the reward whole (nothing granted, no event); the network's retry is
    rewarded once, its webhook event queued with the entry's mark."""
    spotlights = _spotlights(store, ledger, clock)
    hook = WebhookRecord(
        id="wh_rewards",
        account_pid=pid,
        url="https://8.8.8.8/hook",
        events="credits.earned",
        description="",
        secret_salt="salt",
        created_at=int(clock()),
    )
    assert await store.create_webhook(hook, max_per_account=10)
    original = store.insert_grant

    async def failing(rec: GrantRecord, events: object = (), audit: object = None) -> bool:
        raise StoreError("disk full")

    monkeypatch.setattr(store, "insert_grant", failing)
    with pytest.raises(StoreError):
        await spotlights.reward(pid, "view-1")
    assert await ledger.money.account_balance(pid, clock()) == Balance(0, 0, 0)
    monkeypatch.setattr(store, "insert_grant", original)
    clock.advance(120)
    granted_at = int(clock())
    reward = await spotlights.reward(pid, "view-1")  # the companion app retries
    again = await spotlights.reward(pid, "view-1")
    assert again == reward
    (grant,) = await store.list_grants(pid)
    assert (grant.created_at, grant.applied_at) == (granted_at, granted_at)
    assert grant.expires_at == granted_at + 30 * DAY
    balance = await ledger.money.account_balance(pid, clock())
    assert balance is not None
    assert balance.earned == 5000  # granted once
    (delivery,) = await store.list_deliveries("wh_rewards", 10)
    assert delivery.type == "credits.earned"


async def test_a_reward_to_an_account_redis_lost_opens_nothing(
    store: Store, ledger: Ledgers, clock: Clock, pid: str
) -> None:
    """Issue 44 item 3: an account hash opened empty here would be kept by rebuild-redis,
    and the account's credits lost; the reward is a 503 that writes nothing, so the
    network's retry after the rebuild is rewarded (the status comes back with the rebuild:
    ``tests/unit/ops/test_account_status_ops.py``)."""
    await store.set_account_status(pid, ACCOUNT_DISABLED)
    account_hash = ledger.layout.account(ledger.layout.shard(pid), pid)
    await ledger.redis.delete(account_hash)  # Redis lost the account
    with pytest.raises(ApiError) as refused:
        await _spotlights(store, ledger, clock).reward(pid, "view-1")
    assert refused.value.kind is ErrorKind.SERVICE_UNAVAILABLE
    assert not await ledger.redis.exists(account_hash)
    assert await store.list_grants(pid) == []
