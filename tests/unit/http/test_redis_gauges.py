"""The gauges ``GET /metrics`` reads from Redis at scrape time (``redis_gauges``), on
fakeredis, a real Valkey and a real Valkey Cluster: the reservations of every shard, open
and past their deadline, and the usage streams' backlog."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.core.metrics import RedisReadings
from app.core.settings import Settings
from app.http.metrics import redis_gauges
from app.kv.client import RedisClient
from app.runtime import Services
from app.store import Store
from tests.conftest import Clock


@pytest.fixture
async def services(
    tmp_path: Path, redis: RedisClient, store: Store, clock: Clock
) -> AsyncIterator[Services]:
    settings = Settings(
        data_dir=str(tmp_path),
        redis_url="redis://in-process.invalid",  # never dialled: the fixture's client is passed
        database_url=f"sqlite:///{tmp_path / 'svc.db'}",  # the `store` fixture's file
        key_pepper="test-pepper",
    )
    built = Services(settings, redis, store, clock=clock)
    try:
        yield built
    finally:
        await built.close()


async def test_reservations_past_their_deadline_are_counted_over_every_shard(
    services: Services, redis: RedisClient, clock: Clock
) -> None:
    now = int(clock())
    layout = services.layout
    deadlines = {  # shard → the deadlines of its open reservations
        0: [now - 900, now + 1],
        17: [now - 1, now],  # one a second late; one due this very second, not yet late
        layout.shards - 1: [now + 900],
    }
    for shard, scores in deadlines.items():
        rids = {f"rsv-{shard}-{i}": deadline for i, deadline in enumerate(scores)}
        await redis.zadd(layout.reservations(shard), rids)

    assert await redis_gauges(services) == RedisReadings(
        open_reservations=5,
        reservations_past_deadline=2,
        pending_events=0,
        oldest_event_age_s=0.0,
    )

    clock.advance(1.5)  # whole seconds: the one due at `now` is late, the one at now + 1 not
    readings = await redis_gauges(services)
    assert readings is not None
    assert readings.reservations_past_deadline == 3

    clock.advance(-3600)  # nothing is late an hour earlier, however many are open
    assert await redis_gauges(services) == RedisReadings(5, 0, 0, 0.0)


async def test_an_empty_redis_reads_zero_everywhere(services: Services) -> None:
    assert await redis_gauges(services) == RedisReadings(0, 0, 0, 0.0)
