"""AppLovin MAX's and Unity LevelPlay's callbacks through svc's services on fakeredis, the
real Valkey and the real Valkey Cluster: a view rewarded once, 6 views a day are 5 rewards,
50 concurrent deliveries of one event are one reward (a real server), and ``reconcile``
finds the Redis balances and the durable ledger in step after."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from app.core.clock import DAY_S
from app.core.settings import Settings
from app.kv.client import RedisClient
from app.ops.reconcile import reconcile
from app.runtime import Services
from app.spotlights.applovin import reward_callback as reward_applovin
from app.spotlights.levelplay import reward_callback as reward_levelplay
from app.spotlights.rewards import CallbackAnswer
from app.store import Store
from tests.conftest import Clock
from tests.support.mediation import applovin_query, levelplay_query
from tests.support.scripts_helpers import pools

APPLOVIN_KEY = "backend-event-key"
LEVELPLAY_KEY = "backend-private-key"
Deliver = Callable[[Services, str, str], Awaitable[CallbackAnswer | None]]


async def _applovin(services: Services, intent: str, event: str) -> CallbackAnswer | None:
    query = applovin_query(intent, event, APPLOVIN_KEY)
    settings = services.settings
    return await reward_applovin(
        query, settings.applovin_event_keys, settings.applovin_ad_units, services.verified_rewards
    )


async def _levelplay(services: Services, intent: str, event: str) -> CallbackAnswer | None:
    query = levelplay_query(intent, event, LEVELPLAY_KEY, at=services.clock())
    done = await reward_levelplay(
        query, services.settings.levelplay_private_keys, services.verified_rewards
    )
    assert done.reply == f"{event}:OK"
    return done.answer


NETWORKS = {"applovin": _applovin, "levelplay": _levelplay}


def _services(tmp_path: Path, redis: RedisClient, store: Store, clock: Clock) -> Services:
    settings = Settings(
        data_dir=str(tmp_path),
        redis_url="redis://in-process.invalid",  # never dialled: the fixture's client is passed
        database_url=f"sqlite:///{tmp_path / 'svc.db'}",  # the `store` fixture's file
        key_pepper="test-pepper",
        applovin_event_keys=APPLOVIN_KEY,
        levelplay_private_keys=LEVELPLAY_KEY,
    )
    return Services(settings, redis, store, clock=clock)


@pytest.fixture
async def services(
    tmp_path: Path, redis: RedisClient, store: Store, clock: Clock
) -> AsyncIterator[Services]:
    built = _services(tmp_path, redis, store, clock)
    try:
        yield built
    finally:
        await built.close()


@pytest.fixture
async def real_services(
    tmp_path: Path, real_redis: RedisClient, store: Store, clock: Clock
) -> AsyncIterator[Services]:
    built = _services(tmp_path, real_redis, store, clock)
    try:
        yield built
    finally:
        await built.close()


async def _in_step(services: Services) -> None:
    """``reconcile`` finds no drift and no pending ledger entry."""
    settings = services.settings
    report = await reconcile(
        services.redis,
        services.layout,
        services.store,
        now=services.clock(),
        earned_ttl_s=settings.earned_expiry_days * DAY_S,
        usage_retention_s=settings.usage_day_ttl_s,
    )
    assert (report.accounts_with_drift, report.pending_entries) == (0, 0), report


async def _earned(services: Services, pid: str) -> int:
    return (await pools(services.money, pid))[0]


@pytest.mark.parametrize("network", sorted(NETWORKS))
async def test_six_views_a_day_are_five_rewards_each_once(services: Services, network: str) -> None:
    deliver = NETWORKS[network]
    pid = await services.accounts.create_account()
    now = services.clock()
    answers = []
    for n in range(6):
        intent = services.intents.issue(pid, now).token
        answers.append(await deliver(services, intent, f"evt-{n}"))
        retried = await deliver(services, intent, f"evt-{n}")  # the network's retry
        assert retried is not None
        assert not retried.rewarded
    assert [a is not None and a.rewarded for a in answers] == [True] * 5 + [False]
    assert answers[-1] is not None
    assert answers[-1].reason == "daily_limit"
    assert await _earned(services, pid) == 25_000
    grants = [g for g in await services.store.list_grants(pid) if g.kind == "reward"]
    assert sorted(g.grant_id for g in grants) == [f"{network}:{pid}:evt-{n}" for n in range(5)]
    assert {g.source for g in grants} == {network}
    await _in_step(services)


@pytest.mark.parametrize("network", sorted(NETWORKS))
async def test_fifty_concurrent_deliveries_of_one_event_are_one_reward(
    real_services: Services, network: str
) -> None:
    deliver = NETWORKS[network]
    services = real_services
    pid = await services.accounts.create_account()
    intent = services.intents.issue(pid, services.clock()).token
    answers = await asyncio.gather(*(deliver(services, intent, "evt-50") for _ in range(50)))
    rewarded = [a for a in answers if a is not None and a.rewarded]
    assert len(rewarded) == 1
    assert all(a is not None and a.reason == "duplicate" for a in answers if a not in rewarded)
    assert await _earned(services, pid) == 5_000
    grant = await services.store.get_grant(f"{network}:{pid}:evt-50")
    assert grant is not None
    assert (grant.credits, grant.applied_at is not None) == (5_000, True)
    await _in_step(services)
