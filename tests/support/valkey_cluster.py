"""A real 3-primary Valkey Cluster for the tests: ``bench.valkey_cluster`` (the bench measures
Redis's cost per completion on the same one), and what the tests check on it."""

from __future__ import annotations

import os
import signal
import time

import redis
from redis.asyncio.cluster import ClusterNode, RedisCluster

from bench.valkey_cluster import PRIMARIES, SLOTS, ValkeyCluster

__all__ = [
    "PRIMARIES",
    "SLOTS",
    "ValkeyCluster",
    "kill_node",
    "other_primary",
    "pause_node",
    "restart_node",
    "slot_owner",
    "wait_for_promotion",
]


def other_primary(client: RedisCluster) -> ClusterNode:
    """A primary that server-wide commands without target nodes do not reach (the client's
    default node is another): what svc checks there proves it asks every primary."""
    default = client.get_default_node()
    return next(node for node in client.get_primaries() if node.name != default.name)


def kill_node(cluster: ValkeyCluster, port: int) -> None:
    """kill -9 the node on ``port`` (its replica takes its slots after the node timeout)."""
    (server,) = [s for s in cluster.servers if s.port == port]
    process = server._process
    assert process is not None
    process.kill()
    process.wait(10)


def restart_node(cluster: ValkeyCluster, port: int) -> None:
    """Start a killed node again on its port and data (it rejoins as a replica of the node
    that took its slots)."""
    (server,) = [s for s in cluster.servers if s.port == port]
    server._process = None
    server.start(timeout=20.0)


def pause_node(cluster: ValkeyCluster, port: int, paused: bool) -> None:
    """SIGSTOP (``paused``) or SIGCONT the node on ``port``."""
    (server,) = [s for s in cluster.servers if s.port == port]
    assert server._process is not None
    os.kill(server._process.pid, signal.SIGSTOP if paused else signal.SIGCONT)


def slot_owner(cluster: ValkeyCluster, slot: int, *, dead: int | None = None) -> int | None:
    """The port of the primary serving ``slot``, as the first live node that answers says
    (None: no node answers, or the slot has no live primary yet)."""
    for port in cluster.ports:
        if port == dead:
            continue
        try:
            with redis.Redis(port=port, socket_timeout=2) as node:
                ranges = node.execute_command("CLUSTER", "SLOTS")
        except redis.RedisError:
            continue
        for start, end, primary, *_ in ranges:
            if int(start) <= slot <= int(end):
                return int(primary[1])
        return None
    return None


def wait_for_promotion(cluster: ValkeyCluster, slot: int, old: int, timeout_s: float = 60.0) -> int:
    """Wait until another node serves ``slot`` and takes writes: its port."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        owner = slot_owner(cluster, slot, dead=old)
        if owner is not None and owner != old:
            try:
                with redis.Redis(port=owner, socket_timeout=2) as node:
                    if node.info("replication").get("role") == "master":
                        return owner
            except redis.RedisError:
                pass
        time.sleep(0.2)
    raise RuntimeError(f"no replica took slot {slot} over from the node on {old}")
