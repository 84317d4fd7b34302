"""The credit ledger (issue 45 items 1, 2 and 4): every credit into or out of the pools is a
durable entry before Redis changes, applied once however it is retried or repaired; debits
and refunds owe what the pools lack; the ledger reads back newest first, in pages; each
applied entry queues its webhook events once. On fakeredis, the real Valkey and the real
Cluster, each over SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from app.accounts.accounts import Accounts
from app.accounts.ledger import Ledger, LedgerConfig
from app.accounts.ledger_pages import LedgerFilter, ledger_list, parse_ledger_filter
from app.accounts.rewards import Spotlights
from app.core.errors import ApiError, ErrorKind, StoreError
from app.credits.outcomes import ScriptStatus
from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from app.ops.rebuild import rebuild_redis
from app.ops.reconcile import ReconcileReport, reconcile
from app.store import GrantRecord, Store, WebhookRecord
from app.usage.reader import UsageReader
from tests.conftest import Clock
from tests.support.databases import Database
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import key, reserve

DAY = 86_400
USAGE_TTL = 40 * DAY


class World:
    def __init__(self, redis: RedisClient, store: Store) -> None:
        self.redis, self.store = redis, store
        self.layout = KeySpace("svc", 8)
        self.clock = Clock()
        self.ledgers = Ledgers(redis, self.layout, cap_ttl_s=2 * DAY, usage_ttl_s=USAGE_TTL)
        config = LedgerConfig(reward_daily_limit=2, earned_ttl_s=2 * DAY)
        self.ledger = Ledger(store, self.ledgers.money, config, self.clock)
        self.accounts = Accounts(store, self.ledgers.money, ledger=self.ledger, clock=self.clock)
        self.spotlights = Spotlights(
            store,
            self.ledgers.money,
            credits=500,
            daily_limit=2,
            expiry_days=2,
            ledger=self.ledger,
            clock=self.clock,
        )

    async def reconcile(self) -> ReconcileReport:
        return await reconcile(
            self.redis,
            self.layout,
            self.store,
            now=self.clock(),
            earned_ttl_s=2 * DAY,
            usage_retention_s=USAGE_TTL,
        )

    async def balance(self, pid: str) -> tuple[int, int]:
        got = await self.accounts.balance(pid)
        return got.total_available, got.debt


@pytest.fixture
async def world(redis: RedisClient, database: Database) -> AsyncIterator[World]:
    """On SQLite and PostgreSQL (the ``database`` fixture's)."""
    store = database.open()
    await store.migrate()
    made = World(redis, store)
    await UsageReader(made.ledgers.usage, store, retention_s=USAGE_TTL).epoch()
    yield made
    await store.close()


def _failing(times: int, error: Exception) -> Any:
    """A wrapper that raises ``error`` on its first ``times`` calls, then calls through."""

    def wrap(call: Any) -> Any:
        left = [times]

        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            if left[0] > 0:
                left[0] -= 1
                raise error
            return await call(*args, **kwargs)

        return wrapped

    return wrap


async def test_an_entry_is_durable_before_redis_and_repaired_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis fails after the entry is written: 503, the entry stays pending (not counted by
    reconcile, not lost); the repair applies it once, and so would the retry."""
    pid = await world.accounts.create_account()
    money = world.ledgers.money
    monkeypatch.setattr(money, "grant", _failing(1, RedisConnectionError("down"))(money.grant))
    with pytest.raises(ApiError) as failed:
        await world.accounts.grant_purchased(pid, 300, grant_id="grant_x")
    assert failed.value.kind is ErrorKind.SERVICE_UNAVAILABLE
    (entry,) = await world.store.list_grants(pid)
    assert (entry.credits, entry.applied_at) == (300, None)  # durable, pending
    assert await world.balance(pid) == (0, 0)
    report = await world.reconcile()
    assert (report.accounts_with_drift, report.pending_entries) == (0, 1)

    repaired = await asyncio.gather(
        *(world.ledger.repair_pending(older_than_s=0) for _ in range(4))
    )
    assert sum(repaired) == 1
    again = await world.accounts.grant_purchased(pid, 300, grant_id="grant_x")  # the retry
    assert again.total_available == 300
    assert await world.balance(pid) == (300, 0)
    (entry,) = await world.store.list_grants(pid)
    assert entry.applied_at is not None
    report = await world.reconcile()
    assert (report.accounts_with_drift, report.pending_entries) == (0, 0)


async def test_a_crash_after_redis_applied_it_is_marked_not_applied_twice(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = await world.accounts.create_account()
    store = world.store
    monkeypatch.setattr(store, "mark_applied", _failing(1, StoreError("gone"))(store.mark_applied))
    with pytest.raises(StoreError):
        await world.accounts.debit(pid, 40, entry_id="debit_x", reason="chargeback by phone")
    assert await world.balance(pid) == (0, 40)  # Redis has it; the store says pending
    assert await world.ledger.repair_pending(older_than_s=0) == 0  # a DUPLICATE: marked only
    (entry,) = await store.list_grants(pid)
    assert (entry.credits, entry.debt_change, entry.kind) == (0, 40, "debit")
    assert entry.applied_at is not None
    assert entry.reason == "chargeback by phone"
    assert await world.balance(pid) == (0, 40)
    assert (await world.reconcile()).accounts_with_drift == 0


async def test_one_entry_sent_many_times_at_once_applies_once(world: World) -> None:
    pid = await world.accounts.create_account()
    gate = asyncio.Semaphore(8)

    async def send() -> None:
        async with gate:
            await world.accounts.grant_purchased(pid, 70, grant_id="grant_same")

    async def repair() -> None:
        async with gate:
            await world.ledger.repair_pending(older_than_s=0)

    await asyncio.gather(*(send() for _ in range(30)), *(repair() for _ in range(5)))
    assert await world.balance(pid) == (70, 0)
    assert [e.credits for e in await world.store.list_grants(pid)] == [70]
    assert (await world.reconcile()).accounts_with_drift == 0


async def test_a_debit_past_the_balance_is_debt_until_a_grant_pays_it(world: World) -> None:
    pid = await world.accounts.create_account()
    await world.accounts.grant_purchased(pid, 100, reason="order 17")
    await world.spotlights.reward(pid, "view-1")  # 500 earned
    ident = await key(world.ledgers, pid, "k1")
    after = await world.accounts.debit(pid, 650, reason="refund of order 17")
    assert (after.total_available, after.debt) == (0, 50)
    with pytest.raises(ApiError) as refused:
        await reserve(world.ledgers, ident, "rsv1", world.clock())
    assert refused.value.kind is ErrorKind.ACCOUNT_IN_DEBT
    assert "50 credits" in refused.value.message
    paid = await world.accounts.grant_purchased(pid, 80)
    assert (paid.total_available, paid.debt) == (30, 0)
    await reserve(world.ledgers, ident, "rsv2", world.clock(), max_out=30)

    page = await ledger_list(world.store, pid, LedgerFilter(limit=10))
    assert [(e.kind, e.credits, e.debt_change) for e in page.data] == [
        ("grant", 30, -50),
        ("debit", -600, 50),
        ("reward", 500, 0),
        ("grant", 100, 0),
    ]
    assert [e.source for e in page.data] == ["operator"] * 4
    assert page.data[1].reason == "refund of order 17"
    assert not page.has_more
    assert (await world.reconcile()).accounts_with_drift == 0


async def test_the_ledger_pages_newest_first_with_expiries(world: World) -> None:
    pid = await world.accounts.create_account()
    for i in range(5):
        await world.accounts.grant_purchased(pid, 10 + i)
        world.clock.advance(1)
    await world.spotlights.reward(pid, "view-1")
    world.clock.advance(3 * DAY)
    assert await world.ledgers.money.expire_earned(pid, world.clock()) == 500
    from app.usage.flusher import Flusher

    await Flusher(world.redis, world.layout, world.store, interval_s=1, batch_size=100).flush_all()
    seen: list[tuple[str, int]] = []
    after = None
    while True:
        page = await ledger_list(world.store, pid, LedgerFilter(limit=2, after=after))
        seen += [(e.kind, e.credits) for e in page.data]
        if not page.has_more:
            break
        after = page.data[-1].id
    assert seen == [("expiry", -500), ("reward", 500)] + [("grant", 14 - i) for i in range(5)]
    with pytest.raises(ApiError) as bad:
        await ledger_list(world.store, pid, LedgerFilter(after="grant_nope"))
    assert bad.value.kind is ErrorKind.INVALID_VALUE
    lapses_and_rewards = LedgerFilter(kinds=("reward", "expiry"))
    page = await ledger_list(world.store, pid, lapses_and_rewards)
    assert [(e.kind, e.credits) for e in page.data] == [("expiry", -500), ("reward", 500)]
    grants = await ledger_list(world.store, pid, LedgerFilter(limit=3, kinds=("grant",)))
    assert [e.credits for e in grants.data] == [14, 13, 12]
    assert grants.has_more
    for params in ({"kind": "grant,nope"}, {"kind": ""}):
        with pytest.raises(ApiError) as refused:
            parse_ledger_filter(params)
        assert refused.value.param == "kind"
    assert parse_ledger_filter({"kind": "refund, debit"}).kinds == ("refund", "debit")


async def test_a_reward_redis_refuses_takes_its_entry_back(world: World) -> None:
    pid = await world.accounts.create_account()
    for view in ("v1", "v2"):
        await world.spotlights.reward(pid, view)
    with pytest.raises(ApiError) as limited:
        await world.spotlights.reward(pid, "v3")
    assert limited.value.kind is ErrorKind.SPOTLIGHT_LIMIT
    assert [e.reference for e in await world.store.list_grants(pid)] == ["v1", "v2"]


async def test_a_rebuild_restores_the_debt_and_the_markers(world: World) -> None:
    pid = await world.accounts.create_account()
    await world.accounts.grant_purchased(pid, 100)
    await world.accounts.debit(pid, 130, entry_id="debit_r")
    await world.redis.flushall()
    report = await rebuild_redis(
        world.ledgers.money,
        world.ledgers.keys,
        world.ledgers.usage,
        world.store,
        now=world.clock(),
        earned_ttl_s=2 * DAY,
    )
    assert report.accounts_restored == 1
    assert await world.balance(pid) == (0, 30)
    retried = await world.ledger.apply(
        GrantRecord(
            grant_id="debit_r",
            account_pid=pid,
            pool="purchased",
            credits=-130,
            source="operator",
            reference=None,
            created_at=int(world.clock()),
            kind="debit",
        )
    )
    assert retried.status is ScriptStatus.DUPLICATE  # the restored marker: not taken twice
    assert await world.balance(pid) == (0, 30)
    assert (await world.reconcile()).accounts_with_drift == 0


async def test_entries_queue_their_webhook_events_once(world: World) -> None:
    pid = await world.accounts.create_account()
    hook = WebhookRecord(
        id="wh_money",
        account_pid=pid,
        url="https://8.8.8.8/hook",
        events="credits.purchased credits.refunded account.in_debt",
        description="",
        secret_salt="salt",
        created_at=int(world.clock()),
    )
    assert await world.store.create_webhook(hook, max_per_account=10)
    purchase = GrantRecord(
        grant_id="stripe:cs_hook",
        account_pid=pid,
        pool="purchased",
        credits=100,
        source="stripe",
        reference="cs_hook",
        created_at=int(world.clock()),
        kind="purchase",
    )
    for _ in range(2):
        await world.ledger.record(purchase)
    await world.accounts.debit(pid, 160, entry_id="debit_hook")
    await world.accounts.debit(pid, 160, entry_id="debit_hook")
    deliveries = await world.store.list_deliveries("wh_money", 10)
    assert sorted(d.type for d in deliveries) == [
        "account.in_debt",
        "credits.purchased",
        "credits.refunded",
    ]
