"""The Redis client svc talks through: one server (``Redis``: named by its URL, or the
primary the Sentinels name, ``app.kv.sentinel``) or a Redis Cluster (``RedisCluster``).

Both clients offer the same commands, so the rest of svc takes either (``RedisClient``);
on one server the hot path's script calls go out on a pipelined connection of their own
instead (``app.kv.pipelined``). What works on both unchanged: every script call names keys
of one hash tag (one slot, see ``app.kv.layout``), and redis-py's cluster client routes it
to that slot's primary; the untagged keys are read and written one key per command; a
pipeline without a transaction may span slots (the cluster client splits it per node).
``SCRIPT LOAD``/``EXISTS``/``FLUSH`` go to every primary. What needs care is a server-wide question
(``INFO``), which a cluster client would ask one node only: ``primaries_info`` asks each
primary. An operator's command (``run_command``, ``svc admin redis``) comes back as Redis
sent it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, TypeAlias

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.core.errors import RedisReplyError
from app.core.settings import Settings
from app.kv.sentinel import master_client, parse_cluster_nodes

RedisClient: TypeAlias = Redis | RedisCluster

REDIS_ERRORS: tuple[type[RedisError], type[RedisClusterException]] = (
    RedisError,
    RedisClusterException,
)
"""Failures of Redis or of reaching it. The cluster client raises some outside
``RedisError`` (e.g. no node of the cluster answers when it maps the slots again)."""

REDIS_TIMEOUT = RedisTimeoutError
"""A command sent whose reply did not come in time: Redis may still run it."""


def open_redis(settings: Settings, max_connections: int, name: str | None = None) -> RedisClient:
    """A client of ``settings.redis_url``: a cluster client when ``redis_cluster`` is set,
    a client of the primary the Sentinels name when ``redis_sentinels`` is
    (``app.kv.sentinel``).

    The single-server client uses a blocking pool: under a burst a request waits briefly
    for a connection instead of failing (redis-py's default pool raises once its
    connections are all in use). The cluster client has a pool per node, of
    ``max_connections`` each, which raises when exhausted (the request fails closed).

    A command that meets a broken connection goes out once more on a new one: after Redis
    restarts, a pooled connection can still look open when it is taken (the close has not
    reached this process yet). Sending twice is safe because every write svc makes is
    idempotent: scripts carry their own ids (a second reserve of a rid is ``DUPLICATE``, a
    second settle ``NOT_FOUND``), the rest are ``SET NX`` or plain reads. A timeout is not
    retried: the command may still be running, and the caller's Redis timeout is the
    budget."""
    if settings.redis_sentinels:
        return master_client(settings, max_connections, name)
    assert settings.redis_url, "settings must be resolved first"
    timeouts: dict[str, Any] = {
        "socket_timeout": settings.redis_timeout_s,
        "socket_connect_timeout": settings.redis_timeout_s,
        "client_name": name,
    }
    if settings.redis_cluster:
        more = settings.redis_cluster_nodes
        seeds = parse_cluster_nodes(more) if more else []
        return RedisCluster.from_url(
            settings.redis_url,
            max_connections=max_connections,
            startup_nodes=[ClusterNode(host, port) for host, port in seeds],
            **timeouts,
        )
    pool = BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=max_connections,
        timeout=settings.redis_timeout_s,
        retry=Retry(NoBackoff(), retries=1, supported_errors=(RedisConnectionError,)),
        **timeouts,
    )
    return Redis(connection_pool=pool)


async def run_command(redis: RedisClient, command: str, args: Sequence[str]) -> Any:
    """One command as an operator typed it (``svc admin redis``): its reply, or
    ``RedisReplyError`` with Redis's message for an error reply. The arguments
    go as the shell gave them (``os.fsencode``: bytes that are not UTF-8 too), and the reply
    comes back as Redis sent it (``redis-cli``'s view: ``PONG``, ``OK``, a map for a hash
    over RESP3), not as redis-py would make it over (``True``). Nothing is refused: the
    operator's tool is as strong as ``redis-cli``. ``redis`` is the command's own client:
    its parser of ``command`` is set aside for good.

    On a Cluster a command that names a key runs on the primary that owns it, its reply as
    sent; one without a key goes where redis-py's cluster client sends it, and the replies
    of a command sent to every node come back combined as that client combines them
    (``PING``: true when all answered, ``DBSIZE``: the sum, ``KEYS``: one list)."""
    if isinstance(redis, RedisCluster):
        await redis.initialize()  # with the parsers of its own commands (the slot map)
    for name in {command, command.upper()}:
        redis.set_response_callback(name, _as_sent)
    try:
        return await redis.execute_command(command, *(os.fsencode(arg) for arg in args))
    except (RedisConnectionError, RedisTimeoutError):
        raise  # Redis cannot be reached: the 503 of every admin command
    except REDIS_ERRORS as exc:  # an error reply, or a command the cluster client refuses
        raise RedisReplyError(str(exc)) from exc


def _as_sent(response: Any, **_options: Any) -> Any:
    return response


def readable(reply: Any) -> Any:
    """A reply as JSON can hold it: bytes as UTF-8 text (bytes that are not UTF-8 with
    ``\\xNN`` escapes), sequences as lists, sets as sorted lists, maps with text keys."""
    if isinstance(reply, bytes):
        return reply.decode("utf-8", "backslashreplace")
    if isinstance(reply, dict):
        return {str(readable(k)): readable(v) for k, v in reply.items()}
    if isinstance(reply, (set, frozenset)):
        return sorted((readable(item) for item in reply), key=str)
    if isinstance(reply, (list, tuple)):
        return [readable(item) for item in reply]
    return reply


async def primaries_info(redis: RedisClient, section: str) -> list[dict[str, Any]]:
    """``INFO section`` of the server, or of every primary of a cluster."""
    if isinstance(redis, RedisCluster):
        await redis.initialize()
        return [await redis.info(section, target_nodes=node) for node in redis.get_primaries()]
    return [await redis.info(section)]
