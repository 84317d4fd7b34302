"""svc on a Redis Cluster: the client it builds, where the test accounts live, and that a
script call spanning two slots would fail (so the cluster variants of the suites would
show such a mistake). The scripts themselves run on the cluster through the ``redis``
fixture's ``cluster`` variant."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from app.core.settings import Settings
from app.http.errors import as_api_error
from app.kv.client import REDIS_ERRORS, open_redis
from app.kv.layout import KeySpace
from app.ops.resolve import resolve
from tests.support.ledgers import Ledgers
from tests.support.processes import free_port
from tests.support.valkey_cluster import ValkeyCluster, other_primary


@pytest.fixture
async def cluster_client(valkey_cluster: ValkeyCluster) -> AsyncIterator[RedisCluster]:
    client = RedisCluster.from_url(valkey_cluster.url)
    await client.initialize()
    try:
        yield client
    finally:
        await client.aclose()


def _primary_of(client: RedisCluster, layout: KeySpace, pid: str) -> str:
    return str(client.get_node_from_key(layout.account(layout.shard(pid), pid)).name)


async def test_the_suites_accounts_live_on_different_primaries(
    cluster_client: RedisCluster, keyspace: KeySpace
) -> None:
    """The script tests that use two or three accounts (acct_A, acct_B, acct_C) and the
    flusher's (acct_F0…) put them on different primaries, and the 64 shards use all three:
    a call that mixed two accounts' keys would cross nodes, not only slots."""
    primaries = {node.name for node in cluster_client.get_primaries()}
    assert len(primaries) == 3
    on = {pid: _primary_of(cluster_client, keyspace, pid) for pid in ("acct_A", "acct_B", "acct_C")}
    assert set(on.values()) == primaries, on
    flusher = {_primary_of(cluster_client, keyspace, f"acct_F{a}") for a in range(3)}
    assert flusher == primaries
    shard_nodes = {
        cluster_client.get_node_from_key(keyspace.events(shard)).name
        for shard in range(keyspace.shards)
    }
    assert shard_nodes == primaries


async def test_a_script_call_across_two_slots_is_refused(
    cluster_client: RedisCluster, keyspace: KeySpace
) -> None:
    ledger = Ledgers(cluster_client, keyspace, cap_ttl_s=10, usage_ttl_s=10)
    a, b = keyspace.shard("acct_A"), keyspace.shard("acct_B")
    with pytest.raises(REDIS_ERRORS, match="same key slot"):
        await ledger.scripts.run(
            "extend", [keyspace.reservation(a, "r1"), keyspace.reservations(b)], []
        )
    await ledger.scripts.run(
        "extend", [keyspace.reservation(a, "r1"), keyspace.reservations(a)], ["r1", 1]
    )


async def test_a_script_cache_lost_on_one_primary_is_noticed_and_refilled(
    cluster_client: RedisCluster, keyspace: KeySpace
) -> None:
    """A failover or a restart empties one primary's script cache: the readiness check sees
    it (SCRIPT EXISTS asks every primary) and loads the scripts there again."""
    ledger = Ledgers(cluster_client, keyspace, cap_ttl_s=10, usage_ttl_s=10)
    await ledger.scripts.load()
    node = other_primary(cluster_client)
    shas = ledger.scripts.shas
    await cluster_client.execute_command("SCRIPT FLUSH", target_nodes=node)
    assert not any(await cluster_client.execute_command("SCRIPT EXISTS", *shas, target_nodes=node))
    assert await cluster_client.script_exists(shas[0]) == [False]  # as Scripts.loaded asks
    assert await ledger.scripts.loaded()
    assert all(await cluster_client.execute_command("SCRIPT EXISTS", *shas, target_nodes=node))


def test_the_setting_is_read_from_the_environment() -> None:
    env = {"SVC_REDIS_URL": "redis://127.0.0.1:7000", "SVC_REDIS_CLUSTER": "true"}
    assert Settings.from_env(env).redis_cluster
    assert not Settings.from_env({}).redis_cluster


def test_a_cluster_needs_a_url(tmp_path: object) -> None:
    with pytest.raises(ValueError, match="SVC_REDIS_URL"):
        resolve(Settings(data_dir=str(tmp_path), redis_cluster=True))


async def test_open_redis_builds_the_client_the_settings_ask_for(
    valkey_cluster: ValkeyCluster,
) -> None:
    cluster = Settings(redis_url=valkey_cluster.url, redis_cluster=True)
    client = open_redis(cluster, 4, name="svc-background")
    try:
        assert isinstance(client, RedisCluster)
        assert await client.client_getname() == "svc-background"
        for node in client.get_primaries():  # every node's connections carry the name
            assert await client.client_getname(target_nodes=node) == "svc-background"
    finally:
        await client.aclose()
    single = open_redis(Settings(redis_url=valkey_cluster.url), 4)
    try:
        assert type(single) is Redis
    finally:
        await single.aclose()


async def test_an_unreachable_cluster_fails_closed(keyspace: KeySpace) -> None:
    """Nothing listens: the error is one svc treats as Redis down (503, background loops
    retry), though the cluster client raises it outside ``RedisError``."""
    client = open_redis(
        Settings(redis_url=f"redis://127.0.0.1:{free_port()}", redis_cluster=True), 2
    )
    try:
        ledger = Ledgers(client, keyspace, cap_ttl_s=10, usage_ttl_s=10)
        with pytest.raises(REDIS_ERRORS) as caught:
            await ledger.keys.lookup_digest("d" * 64)
        assert as_api_error(caught.value).status == 503
    finally:
        await client.aclose()
