"""A real 3-primary Valkey Cluster for the tests: ``bench.valkey_cluster`` (the bench measures
Redis's cost per completion on the same one), and what the tests check on it."""

from __future__ import annotations

from redis.asyncio.cluster import ClusterNode, RedisCluster

from bench.valkey_cluster import PRIMARIES, SLOTS, ValkeyCluster

__all__ = ["PRIMARIES", "SLOTS", "ValkeyCluster", "other_primary"]


def other_primary(client: RedisCluster) -> ClusterNode:
    """A primary that server-wide commands without target nodes do not reach (the client's
    default node is another): what svc checks there proves it asks every primary."""
    default = client.get_default_node()
    return next(node for node in client.get_primaries() if node.name != default.name)
