"""Grants after Redis lost its data (issue 44 item 3): a grant never opens an account Redis
lacks from nothing (it answers 503 and leaves nothing behind, so the network's or the
operator's retry after ``rebuild-redis`` applies it once), and ``rebuild-redis --force``
recomputes every account ``reconcile`` flags. On fakeredis, the real Valkey and the real
Cluster, over SQLite."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.exceptions import TimeoutError as RedisTimeout

from app.accounts.accounts import Accounts
from app.accounts.api_keys import ApiKeys
from app.accounts.bodies import KeyCreateRequest
from app.accounts.rewards import Spotlights
from app.core.clock import day_tag, utc_day
from app.core.errors import ApiError, ErrorKind
from app.credits.outcomes import Hold, Identity
from app.keys.auth import Authenticator
from app.kv.client import RedisClient
from app.kv.fields import AccountField
from app.kv.layout import KeySpace
from app.ops.rebuild import RebuildReport, rebuild_redis
from app.ops.reconcile import ReconcileReport, reconcile
from app.store import Store, open_store
from app.usage.flusher import Flusher
from app.usage.reader import UsageReader
from tests.conftest import Clock
from tests.support.ledgers import Ledgers

DAY = 86_400
USAGE_TTL = 40 * DAY
PURCHASED = 9_997
REWARD = 500
REBUILD_TRIES = 10
SPENDS_PER_WORKER = 250


class Loss:
    """One Redis (the ``redis`` fixture's), a SQLite store and the services over them."""

    def __init__(self, redis: RedisClient, store: Store) -> None:
        self.redis = redis
        self.store = store
        self.layout = KeySpace("svc", 8)
        self.clock = Clock()
        self.ledger = Ledgers(redis, self.layout, cap_ttl_s=2 * DAY, usage_ttl_s=USAGE_TTL)
        self.accounts = Accounts(store, self.ledger.money, clock=self.clock)
        self.api_keys = ApiKeys(store, self.ledger.keys, self.accounts, b"p", clock=self.clock)
        self.spotlights = Spotlights(
            store, self.ledger.money, credits=REWARD, expiry_days=2, clock=self.clock
        )

    async def rebuild(self, *, force: bool = True, confirm_s: float = 0.01) -> RebuildReport:
        return await rebuild_redis(
            self.ledger.money,
            self.ledger.keys,
            self.ledger.usage,
            self.store,
            now=self.clock(),
            earned_ttl_s=2 * DAY,
            force=force,
            confirm_s=confirm_s,
        )

    async def reconcile(self) -> ReconcileReport:
        return await reconcile(
            self.redis,
            self.layout,
            self.store,
            now=self.clock(),
            earned_ttl_s=2 * DAY,
            usage_retention_s=USAGE_TTL,
            everything=True,
        )

    async def ledger_total(self, pid: str) -> int:
        (check,) = [c for c in (await self.reconcile()).accounts if c.account_pid == pid]
        assert check.ledger is not None
        return check.ledger.total

    async def redis_total(self, pid: str) -> int:
        return (await self.accounts.balance(pid)).total_available


@pytest.fixture
async def loss(redis: RedisClient, tmp_path: Path) -> AsyncIterator[Loss]:
    store = open_store(f"sqlite:///{tmp_path / 'svc.db'}")
    await store.migrate()
    world = Loss(redis, store)
    await UsageReader(world.ledger.usage, store, retention_s=USAGE_TTL).epoch()
    yield world
    await store.close()


async def _grants_before_the_rebuild(loss: Loss, pid: str) -> list[ApiError]:
    """An operator grant and a spotlight reward that reach svc before rebuild-redis: what
    each was refused with (nothing when it was applied)."""
    refused = []
    for grant in (
        lambda: loss.accounts.grant_purchased(pid, 100),
        lambda: loss.spotlights.reward(pid, "view-1"),
    ):
        try:
            await grant()
        except ApiError as error:
            refused.append(error)
    return refused


async def test_grants_after_a_flushall_leave_the_balance_to_the_durable_ledger(
    loss: Loss,
) -> None:
    """The audit's case: 9,997 purchased credits became 0 (the grant opened an empty hash,
    which rebuild-redis --force kept)."""
    pid = await loss.accounts.create_account()
    await loss.accounts.grant_purchased(pid, PURCHASED)
    await loss.redis.flushall()
    await _grants_before_the_rebuild(loss, pid)
    await loss.rebuild(force=True)
    assert await loss.redis_total(pid) == await loss.ledger_total(pid)
    assert await loss.redis_total(pid) >= PURCHASED
    assert (await loss.reconcile()).accounts_with_drift == 0


async def test_a_grant_to_an_account_redis_lost_is_a_503_that_leaves_nothing(
    loss: Loss,
) -> None:
    pid = await loss.accounts.create_account()
    await loss.accounts.grant_purchased(pid, PURCHASED)
    await loss.redis.flushall()
    refused = await _grants_before_the_rebuild(loss, pid)
    assert [e.kind for e in refused] == [ErrorKind.SERVICE_UNAVAILABLE] * 2
    assert all(e.headers.get("retry-after") for e in refused)
    assert len(await loss.store.list_grants(pid)) == 1  # the refused grant's row is gone
    assert not await loss.redis.exists(loss.layout.account(loss.layout.shard(pid), pid))

    done = await loss.rebuild(force=False)  # nothing was opened: Redis is still empty
    assert done.accounts_restored == 1
    assert await loss.redis_total(pid) == PURCHASED
    # the retries after the rebuild are applied, once each
    await _grants_before_the_rebuild(loss, pid)
    await loss.spotlights.reward(pid, "view-1")
    assert await loss.redis_total(pid) == await loss.ledger_total(pid) == PURCHASED + 100 + REWARD
    assert (await loss.reconcile()).accounts_with_drift == 0


async def test_force_recomputes_an_account_reconcile_flags(loss: Loss) -> None:
    """A hash opened empty after a loss (as svc before this fix did) is recomputed from the
    ledger, what open reservations hold left out; an account without drift is untouched."""
    pid = await loss.accounts.create_account()
    other = await loss.accounts.create_account()
    await loss.accounts.grant_purchased(pid, PURCHASED)
    await loss.accounts.grant_purchased(other, 40)
    await loss.spotlights.reward(pid, "view-1")
    name = loss.layout.account(loss.layout.shard(pid), pid)
    await loss.redis.hset(name, mapping={AccountField.EARNED: 0, AccountField.PURCHASED: 0})
    flagged = {c.account_pid for c in (await loss.reconcile()).accounts if c.status != "ok"}
    assert flagged == {pid}

    done = await loss.rebuild(force=True)
    assert (done.accounts_kept, done.accounts_recomputed) == (2, 1)
    assert (await loss.reconcile()).accounts_with_drift == 0
    balance = await loss.accounts.balance(pid)
    assert (balance.purchased_available, balance.earned_available) == (PURCHASED, REWARD)
    assert await loss.redis_total(other) == 40


async def test_a_recompute_under_concurrent_spending_converges(loss: Loss) -> None:
    """Reservations opened and settled while --force recomputes: it adds the difference
    between the ledger and Redis at one instant (correct_pools.lua), which every spend
    moves on both sides alike, so no credit is lost or made."""
    pid = await loss.accounts.create_account()
    await loss.accounts.grant_purchased(pid, PURCHASED)
    created = await loss.api_keys.create_key(
        pid, KeyCreateRequest(name="k", environment="live", daily_cap_credits=None)
    )
    name = loss.layout.account(loss.layout.shard(pid), pid)
    await loss.redis.hset(name, AccountField.PURCHASED, 5_000)  # 4,997 lost
    auth = Authenticator(loss.ledger.keys, loss.ledger.throttle, loss.store, b"p", clock=loss.clock)
    ident = await auth.identify(f"Bearer {created.key}")

    rebuilt: list[RebuildReport] = []
    finished = asyncio.Event()
    spent = 0

    async def spend(worker: int) -> None:
        nonlocal spent
        i = 0
        # spending while the rebuild runs, at most SPENDS_PER_WORKER times: four workers
        # then take at most 3,000 of the 5,000 credits Redis kept, however long it runs
        while (not finished.is_set() or i < 3) and i < SPENDS_PER_WORKER:
            i += 1
            await _spend(loss, ident, f"r{worker}-{i}", 3, completion_tokens=1)
            spent += 3
            await asyncio.sleep(0.002)  # busy, not flat out: reconcile's reads need a gap

    async def rebuild() -> None:
        await asyncio.sleep(0.01)
        try:
            # a shard whose reservations change between every two reads answers 503 after
            # MAX_READS tries (a slow machine, four spenders): the operator runs it again
            for _ in range(REBUILD_TRIES):
                try:
                    rebuilt.append(await loss.rebuild(force=True))
                    return
                except ApiError as refused:
                    if refused.status != 503:
                        raise
                    await asyncio.sleep(0.01)
        finally:
            finished.set()

    await asyncio.gather(*(spend(w) for w in range(4)), rebuild())
    (done,) = rebuilt
    assert done.accounts_recomputed == 1
    assert (await loss.reconcile()).accounts_with_drift == 0
    assert await loss.redis_total(pid) == PURCHASED - spent


async def test_an_account_whose_redis_write_fails_is_not_created(
    loss: Loss, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Redis stall while an account is created: the store keeps no row of it (a retry
    would make a second account beside an orphan one)."""

    async def stalled(*args: object, **kwargs: object) -> None:
        raise RedisTimeout("Timeout reading from socket")

    monkeypatch.setattr(loss.ledger.money, "open_account", stalled)
    with pytest.raises(RedisTimeout):
        await loss.accounts.create_account()
    assert await loss.store.list_accounts() == []


async def test_a_refused_grant_keeps_the_row_of_a_retry_redis_applied(
    loss: Loss, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two attempts with one grant id (an Idempotency-Key retry): the first is refused
    (Redis lost the account); before it takes its row back, the account is restored and
    the second applies the grant (its insert found the first's row). The row stays: the
    ledger keeps what Redis holds."""
    pid = await loss.accounts.create_account()
    await loss.accounts.grant_purchased(pid, PURCHASED)
    await loss.redis.flushall()
    real_delete = loss.store.delete_grant
    retried = []

    async def retry_first(grant_id: str) -> bool:
        if not retried:
            retried.append(grant_id)
            await loss.rebuild(force=False)
            await loss.accounts.grant_purchased(pid, 100, grant_id=grant_id)
        return await real_delete(grant_id)

    monkeypatch.setattr(loss.store, "delete_grant", retry_first)
    with pytest.raises(ApiError) as refused:
        await loss.accounts.grant_purchased(pid, 100, grant_id="grant_retried")
    assert refused.value.kind is ErrorKind.SERVICE_UNAVAILABLE
    assert retried == ["grant_retried"]
    assert await loss.redis_total(pid) == await loss.ledger_total(pid) == PURCHASED + 100
    # (grants of one second are listed by id: the retried one is anywhere among them)
    assert "grant_retried" in {g.grant_id for g in await loss.store.list_grants(pid)}


async def test_settles_redis_lost_after_their_flush_are_charged_again_by_the_rebuild(
    loss: Loss,
) -> None:
    """Redis went back in time (restarted from an older AOF): the last settles are gone
    from its pools and counters, but the flusher had moved them into the durable rollups.
    ``rebuild-redis --force`` takes their credits again and moves the counters (all-time
    and the day's) to the rollups', so reconcile is clean."""
    pid = await loss.accounts.create_account()
    await loss.accounts.grant_purchased(pid, PURCHASED)
    created = await loss.api_keys.create_key(
        pid, KeyCreateRequest(name="k", environment="live", daily_cap_credits=None)
    )
    auth = Authenticator(loss.ledger.keys, loss.ledger.throttle, loss.store, b"p", clock=loss.clock)
    ident = await auth.identify(f"Bearer {created.key}")
    for i in range(4):
        await _spend(loss, ident, f"r{i}", 5, completion_tokens=2)
    await Flusher(loss.redis, loss.layout, loss.store, clock=loss.clock).flush_all()
    # what an older copy of Redis holds: the last two settles never happened there
    shard = loss.layout.shard(pid)
    await loss.redis.hincrby(loss.layout.account(shard, pid), AccountField.PURCHASED, 10)
    day = day_tag(utc_day(loss.clock()))
    for key in (loss.layout.usage_total(shard, pid), loss.layout.usage_day(shard, pid, day)):
        counters = await loss.redis.hgetall(key)
        for name, value in counters.items():
            lost = int(value) // 2  # each counter counted four alike settles
            await loss.redis.hincrby(key, name, -lost)
    before = await loss.reconcile()
    assert before.accounts_with_drift == 1
    (check,) = before.accounts
    assert check.balance_drift == 10
    assert check.usage_drift["live:credits"] == -10
    assert check.day_drift[utc_day(loss.clock())]["live:credits"] == -10

    done = await rebuild_with_usage(loss)
    assert (done.accounts_recomputed, done.usage_corrected) == (1, 1)
    assert await loss.redis_total(pid) == PURCHASED - 20
    assert (await loss.reconcile()).accounts_with_drift == 0
    assert (await rebuild_with_usage(loss)).usage_corrected == 0  # nothing left to move


async def rebuild_with_usage(loss: Loss) -> RebuildReport:
    return await rebuild_redis(
        loss.ledger.money,
        loss.ledger.keys,
        loss.ledger.usage,
        loss.store,
        now=loss.clock(),
        earned_ttl_s=2 * DAY,
        force=True,
        confirm_s=0.01,
        usage_retention_s=USAGE_TTL,
    )


async def _spend(
    loss: Loss, ident: Identity, rid: str, credits: int, *, completion_tokens: int
) -> None:
    """One request of ``ident`` reserved and settled at ``credits``."""
    hold = await loss.ledger.holds.reserve(
        ident,
        rid=rid,
        now=loss.clock(),
        prompt_units=1000,
        output_price=1000,
        max_out=10,
        min_out=1,
        deadline=loss.clock() + 600,
        alias="svc-fast",
        requested="svc-fast",
        models="svc-fast",
    )
    assert isinstance(hold, Hold), hold
    await loss.ledger.holds.settle(
        hold,
        now=loss.clock(),
        credits_used=credits,
        prompt_tokens=1,
        completion_tokens=completion_tokens,
        outcome="completed",
    )
