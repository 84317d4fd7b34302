"""``reconcile`` and ``rebuild_redis`` on the real Valkey, over SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis.asyncio import Redis

from app.accounts.accounts import Accounts
from app.accounts.api_keys import ApiKeys
from app.accounts.bodies import KeyCreateRequest
from app.accounts.rewards import Spotlights
from app.core.clock import day_tag, utc_day
from app.core.errors import ApiError, ErrorKind
from app.credits.outcomes import Hold, Refusal
from app.keys.auth import Authenticator
from app.keys.refusals import refusal_error
from app.kv.fields import API_CHAT, API_RESPONSES, AccountField
from app.kv.layout import KeySpace
from app.ops.rebuild import rebuild_redis
from app.ops.reconcile import ReconcileReport, reconcile
from app.store import Store, open_store
from app.usage.flusher import Flusher
from app.usage.reader import UsageReader
from tests.conftest import Clock
from tests.support.ledgers import Ledgers

DAY = 86_400
TTL = 2 * DAY
USAGE_TTL = 40 * DAY
PEPPER = b"pepper"


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'svc.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    s = open_store(url)
    await s.migrate()
    yield s
    await s.close()


@dataclass
class World:
    redis: Redis
    layout: KeySpace
    store: Store
    ledger: Ledgers
    accounts: Accounts
    api_keys: ApiKeys
    spotlights: Spotlights
    flusher: Flusher
    clock: Clock
    secrets: dict[str, str]  # name -> key secret
    pids: list[str]
    open_holds: list[Hold]


@pytest.fixture
async def world(real_redis: Redis, store: Store) -> World:
    layout = KeySpace("svc", 8)
    clock = Clock()
    ledger = Ledgers(real_redis, layout, cap_ttl_s=TTL, usage_ttl_s=USAGE_TTL)
    # as a server does at start-up: Redis holds every day's counters from its epoch on
    await UsageReader(ledger.usage, store, retention_s=USAGE_TTL).epoch()
    accounts = Accounts(store, ledger.money, clock=clock)
    return World(
        redis=real_redis,
        layout=layout,
        store=store,
        ledger=ledger,
        accounts=accounts,
        api_keys=ApiKeys(store, ledger.keys, accounts, PEPPER, clock=clock),
        spotlights=Spotlights(store, ledger.money, credits=500, expiry_days=2, clock=clock),
        flusher=Flusher(real_redis, layout, store, clock=clock),
        clock=clock,
        secrets={},
        pids=[],
        open_holds=[],
    )


async def _request(
    w: World,
    name: str,
    rid: str,
    used: int | None,
    max_out: int = 40,
    api: str = API_CHAT,
    *,
    explicit: bool = False,
) -> Hold:
    """One completion with key ``name``: reserved, then settled at ``used`` (None: left open).
    ``explicit``: the client chose max_out (held in full, never lowered)."""
    auth = Authenticator(w.ledger.keys, w.ledger.throttle, w.store, PEPPER, clock=w.clock)
    ident = await auth.identify(f"Bearer {w.secrets[name]}")
    hold = await w.ledger.holds.reserve(
        ident,
        rid=rid,
        now=w.clock(),
        prompt_units=2000,
        output_price=1000,
        max_out=max_out,
        min_out=max_out if explicit else 1,
        deadline=w.clock() + 600,
        alias="svc-fast",
        requested="svc-auto",
        models="svc-fast",
        api=api,
    )
    if isinstance(hold, Refusal):
        raise refusal_error(hold)  # as the streams answer it
    assert isinstance(hold, Hold), hold
    if used is None:
        w.open_holds.append(hold)
    else:
        await w.ledger.holds.settle(
            hold,
            now=w.clock(),
            credits_used=used,
            prompt_tokens=50,
            completion_tokens=used,
            outcome="completed",
        )
    return hold


async def _key(w: World, pid: str, name: str, environment: str = "live") -> None:
    created = await w.api_keys.create_key(
        pid, KeyCreateRequest(name=name, environment=environment, daily_cap_credits=None)
    )
    w.secrets[name] = created.key


async def mixed_load(w: World) -> None:
    """Live and test keys, purchased and earned grants, spotlights, expiries (in reserve,
    settle and grant), flushed and unflushed usage of both APIs, open reservations."""
    for _ in range(3):
        w.pids.append(await w.accounts.create_account())
    a, b, c = w.pids
    await w.accounts.grant_purchased(a, 10_000)
    await w.accounts.grant_purchased(b, 300)
    await w.accounts.grant_purchased(c, 100)
    for pid, views in ((a, 2), (b, 1), (c, 1)):
        for v in range(views):
            await w.spotlights.reward(pid, f"view-{v}")
    await _key(w, a, "a-live")
    await _key(w, a, "a-test", "test")
    await _key(w, b, "b-live")
    await _key(w, c, "c-live")
    await _request(w, "a-live", "r1", 25)
    await _request(w, "a-test", "r2", 30)
    await _request(w, "b-live", "r3", 10, api=API_RESPONSES)
    held_across_expiry = await _request(w, "a-live", "r4", None)
    await w.flusher.flush_all()  # some usage durable, the rest not
    await _request(w, "c-live", "r5", 12)
    await _request(w, "a-test", "r6", None, api=API_RESPONSES)
    w.clock.advance(3 * DAY)  # every earned pool is past its expiry now
    await _request(w, "c-live", "r7", 3)  # reserve expires c's pool
    await w.ledger.holds.settle(  # settle lapses what a's hold kept of the expired pool
        held_across_expiry,
        now=w.clock(),
        credits_used=5,
        prompt_tokens=9,
        completion_tokens=5,
        outcome="client_disconnect",
    )
    w.open_holds.remove(held_across_expiry)
    await w.accounts.grant_purchased(b, 50)  # the grant expires b's pool
    await w.spotlights.reward(a, "view-late")
    await _request(w, "a-live", "r8", 7, api=API_RESPONSES)
    await w.flusher.flush_all()
    await _request(w, "b-live", "r9", 4, api=API_RESPONSES)
    await _request(w, "a-live", "r10", None)  # open at the end


async def _reconcile(w: World) -> ReconcileReport:
    return await reconcile(
        w.redis,
        w.layout,
        w.store,
        now=w.clock(),
        earned_ttl_s=2 * DAY,
        usage_retention_s=USAGE_TTL,
        everything=True,
    )


def _drifting(report: ReconcileReport) -> list[str]:
    return [c.account_pid for c in report.accounts if c.status != "ok"]


async def test_no_drift_after_a_mixed_load(world: World) -> None:
    first_day = utc_day(world.clock())
    await mixed_load(world)
    report = await _reconcile(world)
    assert (report.accounts_checked, report.accounts_with_drift, report.balance_drift) == (3, 0, 0)
    assert report.unflushed_events > 0
    assert _drifting(report) == []
    # the day counters were compared too, both days of the load (durable and unflushed)
    assert report.first_day_checked is not None
    assert report.first_day_checked <= first_day
    by_pid = {c.account_pid: c for c in report.accounts}
    for pid in world.pids:
        check = by_pid[pid]
        assert check.redis is not None
        assert check.ledger is not None
        assert check.redis.total == check.ledger.total
        assert check.ledger.expired > 0  # each account had earned credits lapse
        assert (check.usage_drift, check.day_drift) == ({}, {})
    # the Responses part of the counters was compared as well: b's flushed and unflushed
    b = by_pid[world.pids[1]]
    assert b.redis is not None
    usage_key = world.layout.usage_total(world.layout.shard(b.account_pid), b.account_pid)
    assert int(await world.redis.hget(usage_key, "live:responses:credits")) == 14
    by_day = await world.store.ledger_snapshot(since_day=report.first_day_checked)
    assert {d.day for d in by_day.usage_days} == {first_day, utc_day(world.clock())}
    a = by_pid[world.pids[0]]
    assert a.redis is not None
    assert a.redis.held > 0
    assert world.open_holds
    durable = await world.store.ledger_snapshot()
    assert sum(durable.expiries.values()) > 0  # some expiries reached the store
    assert any(u.earned_credits for u in durable.usage)


async def test_a_lost_balance_is_reported_and_restored(world: World) -> None:
    await mixed_load(world)
    b = world.pids[1]
    await world.redis.delete(world.layout.account(world.layout.shard(b), b))
    report = await _reconcile(world)
    assert _drifting(report) == [b]
    (check,) = [c for c in report.accounts if c.account_pid == b]
    assert check.status == "missing_in_redis"
    assert check.ledger is not None
    assert check.balance_drift == -check.ledger.total < 0
    # only reporting: nothing changed
    assert _drifting(await _reconcile(world)) == [b]

    with pytest.raises(ApiError) as refused:
        await rebuild_redis(
            world.ledger.money,
            world.ledger.keys,
            world.ledger.usage,
            world.store,
            now=world.clock(),
            earned_ttl_s=2 * DAY,
        )
    assert refused.value.kind is ErrorKind.REDIS_NOT_EMPTY
    done = await rebuild_redis(
        world.ledger.money,
        world.ledger.keys,
        world.ledger.usage,
        world.store,
        now=world.clock(),
        earned_ttl_s=2 * DAY,
        force=True,
    )
    assert (done.accounts_restored, done.accounts_kept) == (1, 2)
    assert done.purchased_credits + done.earned_credits == check.ledger.total
    assert (await _reconcile(world)).accounts_with_drift == 0


async def test_flushall_then_rebuild(world: World) -> None:
    await mixed_load(world)
    a, b, c = world.pids
    await world.api_keys.revoke_key(a, "key_" + world.secrets["a-test"][9:21])
    await world.store.set_low_balance(b, 123)  # a webhooks' credits.low threshold
    await world.ledger.money.set_low_balance(b, 123, world.clock())
    before = {c.account_pid: c for c in (await _reconcile(world)).accounts}
    # what the store can give back: the ledger without the events that were never flushed
    expected = {
        pid: check.ledger.total + check.ledger.unflushed_used + check.ledger.unflushed_expired
        for pid, check in before.items()
        if check.ledger is not None
    }
    await world.redis.flushall()

    done = await rebuild_redis(
        world.ledger.money,
        world.ledger.keys,
        world.ledger.usage,
        world.store,
        now=world.clock(),
        earned_ttl_s=2 * DAY,
    )
    assert done.accounts_restored == 3
    assert (done.keys_restored, done.revoked_keys_restored) == (4, 1)
    assert done.purchased_credits + done.earned_credits == sum(expected.values())
    assert done.grant_markers == 9  # 4 purchases + 5 spotlights
    assert done.spotlight_counters == 1  # a's late view, today
    assert "reservations" in done.lost
    report = await _reconcile(world)
    assert (report.accounts_with_drift, report.unflushed_events) == (0, 0)
    account_b = world.layout.account(world.layout.shard(b), b)
    assert await world.redis.hget(account_b, AccountField.LOW) == b"123"  # restored
    for pid in (a, b, c):
        balance = await world.accounts.balance(pid)
        assert balance.total_available == expected[pid]

    # the same keys work again: the cold path re-warms each digest from the store
    assert not await world.redis.keys("svc:kd:*")
    before_a = (await world.accounts.balance(a)).total_available
    await _request(world, "a-live", "after-1", 9)
    assert (await world.accounts.balance(a)).total_available == before_a - 9
    with pytest.raises(ApiError) as revoked:
        await _request(world, "a-test", "after-2", 1)
    assert revoked.value.kind is ErrorKind.API_KEY_REVOKED
    # a view rewarded before the loss is not rewarded twice
    await world.spotlights.reward(a, "view-0")
    assert (await world.accounts.balance(a)).total_available == before_a - 9
    # and the new events flush after the old cursors
    assert await world.flusher.flush_all() > 0
    assert (await _reconcile(world)).accounts_with_drift == 0


async def test_rebuild_restores_todays_cap_counters_so_no_key_spends_its_cap_twice(
    world: World,
) -> None:
    pid = await world.accounts.create_account()
    await world.accounts.grant_purchased(pid, 10_000)
    capped = await world.api_keys.create_key(
        pid, KeyCreateRequest(name="capped", environment="live", daily_cap_credits=100)
    )
    world.secrets["capped"] = capped.key
    await _key(world, pid, "free")  # no cap: no counter to restore
    await _request(world, "capped", "yesterday", 50, explicit=True)
    world.clock.advance(DAY)  # yesterday's spend is not today's
    await _request(world, "capped", "today-1", 25, explicit=True)
    successor = await world.api_keys.rotate_key(pid, capped.id, 3600)
    world.secrets["capped-2"] = successor.key
    await _request(world, "capped-2", "today-2", 20, explicit=True)  # one counter: the lineage's
    await _request(world, "free", "today-3", 9)
    await world.flusher.flush_all()
    counter = world.layout.cap(
        world.layout.shard(pid), capped.id[4:], day_tag(utc_day(world.clock()))
    )
    assert int(await world.redis.get(counter)) == 45

    await world.redis.flushall()  # Redis loses everything mid-day
    done = await rebuild_redis(
        world.ledger.money,
        world.ledger.keys,
        world.ledger.usage,
        world.store,
        now=world.clock(),
        earned_ttl_s=2 * DAY,
    )
    assert done.cap_counters == 2  # the capped lineage and the uncapped key's spend
    assert int(await world.redis.get(counter)) == 45
    # what the cap leaves today is what it left before the loss: 55, not 100
    hold = await _request(world, "capped-2", "after", None, max_out=53, explicit=True)
    assert hold.amount == 55
    with pytest.raises(ApiError) as refused:
        await _request(world, "capped", "over", None, max_out=1, explicit=True)
    # the 45 restored are settled spend; the rest of the cap is "after"'s hold, in flight
    assert refused.value.kind is ErrorKind.DAILY_CAP_HELD


@pytest.mark.parametrize("field", ["live:requests", "live:responses:credits"])
async def test_reconcile_sees_usage_counter_drift(world: World, field: str) -> None:
    await mixed_load(world)
    c = world.pids[2]
    await world.redis.hincrby(world.layout.usage_total(world.layout.shard(c), c), field, 2)
    report = await _reconcile(world)
    assert _drifting(report) == [c]
    (check,) = [x for x in report.accounts if x.account_pid == c]
    assert (check.balance_drift, check.usage_drift) == (0, {field: 2})


async def _bump_day_counter(w: World, pid: str, day: str, field: str, by: int) -> None:
    """What a settle that failed half-way did: one day counter moved, nothing else."""
    await w.redis.hincrby(w.layout.usage_day(w.layout.shard(pid), pid, day_tag(day)), field, by)


async def test_reconcile_sees_a_day_counter_apart_from_the_all_time_one(world: World) -> None:
    first_day = utc_day(world.clock())
    await mixed_load(world)
    c = world.pids[2]
    await _bump_day_counter(world, c, first_day, "live:requests", 1)
    report = await _reconcile(world)
    assert _drifting(report) == [c]
    assert report.accounts_with_drift == 1
    (check,) = [x for x in report.accounts if x.account_pid == c]
    assert check.status == "drift"
    assert (check.balance_drift, check.usage_drift) == (0, {})
    assert check.day_drift == {first_day: {"live:requests": 1}}


async def test_days_before_the_usage_epoch_are_not_compared(world: World) -> None:
    first_day = utc_day(world.clock())
    await mixed_load(world)
    today = utc_day(world.clock())
    c = world.pids[2]
    await _bump_day_counter(world, c, first_day, "live:requests", 1)
    # Redis lost its data yesterday: it holds complete counters from today on only
    await world.redis.set(world.layout.usage_epoch(), int(world.clock()) // DAY * DAY)
    report = await _reconcile(world)
    assert (report.first_day_checked, report.accounts_with_drift) == (today, 0)
    await _bump_day_counter(world, c, today, "test:credits", -2)
    report = await _reconcile(world)
    assert _drifting(report) == [c]
    (check,) = [x for x in report.accounts if x.account_pid == c]
    assert check.day_drift == {today: {"test:credits": -2}}

    # Without an epoch, the one a server would start (after the last durable day, today
    # here): no day is compared, and reconcile does not set it.
    await world.redis.delete(world.layout.usage_epoch())
    report = await _reconcile(world)
    assert (report.first_day_checked, report.accounts_with_drift) == (None, 0)
    assert await world.redis.get(world.layout.usage_epoch()) is None
