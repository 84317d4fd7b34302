"""Redis behind Sentinel: the primary found by asking the Sentinels, and found again after
a failover, without a restart.

``SVC_REDIS_SENTINELS`` names the Sentinels (``host:port,…``) and
``SVC_REDIS_SENTINEL_SERVICE`` the primary they watch. Every connection svc opens to Redis
asks them where the primary is first: the pooled clients through redis-py's Sentinel pool
(made blocking here, as ``app.kv.client``'s single-server pool is), the hot path's pipelined
connection through ``master_locator``. After a failover the old primary's connections break
(it died) or answer ``READONLY`` (it came back as a replica): both close the connection, the
command goes out once more on a new one to the primary the Sentinels name now, and a
command that still finds none fails (a request gets 503): nothing is served while svc
cannot reach a primary.

``SVC_REDIS_URL`` may still be set beside the Sentinels: it then gives only what the data
nodes want of a connection (password, database, ``rediss://`` and its TLS options); its
host and port are not used.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from app.core.errors import SettingsError
from app.core.settings import Settings

DEFAULT_URL = "redis://"
"""The data nodes' connection options when ``SVC_REDIS_URL`` is not set: none."""

Locator = Callable[[], Awaitable[tuple[str, int]]]


def redis_named(settings: Settings) -> str:
    """Redis as a startup message names it: its URL, or the Sentinels and their service."""
    if settings.redis_sentinels:
        return f"sentinel://{settings.redis_sentinels}/{settings.redis_sentinel_service}"
    return settings.redis_url or DEFAULT_URL


def parse_addresses(text: str, variable: str, what: str) -> list[tuple[str, int]]:
    """``host:port,…`` as (host, port) pairs; a ``SettingsError`` naming ``variable`` and
    what is wrong."""
    found: list[tuple[str, int]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65_536:
            raise SettingsError(f"{variable}: {item!r} is not host:port")
        found.append((host.strip("[]"), int(port)))
    if not found:
        raise SettingsError(f"{variable} names no {what} (host:port,…)")
    return found


def parse_sentinels(text: str) -> list[tuple[str, int]]:
    return parse_addresses(text, "SVC_REDIS_SENTINELS", "Sentinel")


def parse_cluster_nodes(text: str) -> list[tuple[str, int]]:
    return parse_addresses(text, "SVC_REDIS_CLUSTER_NODES", "Cluster node")


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """redis-py's Sentinel pool, waiting for a connection when all are taken (as the
    single-server pool does) rather than failing the request."""


def _node_options(settings: Settings) -> dict[str, Any]:
    """What a connection to a data node needs from ``SVC_REDIS_URL``, without an address."""
    url = settings.redis_url or DEFAULT_URL
    options: dict[str, Any] = dict(parse_url(url))
    for address in ("host", "port", "path", "connection_class"):
        options.pop(address, None)
    if url.startswith("rediss://"):
        options["ssl"] = True  # the Sentinel pool picks its TLS connection class for it
    return options


def sentinel_manager(settings: Settings, *, name: str | None = None) -> Sentinel:
    """A client of the Sentinels, whose primaries' connections carry ``name`` and the data
    nodes' options."""
    timeouts = {
        "socket_timeout": settings.redis_timeout_s,
        "socket_connect_timeout": settings.redis_timeout_s,
    }
    sentinel_options: dict[str, Any] = dict(timeouts)
    if settings.redis_sentinel_password:
        sentinel_options["password"] = settings.redis_sentinel_password
    return Sentinel(  # type: ignore[no-untyped-call]
        parse_sentinels(settings.redis_sentinels),
        sentinel_kwargs=sentinel_options,
        **timeouts,
        **_node_options(settings),
        client_name=name,
    )


def master_client(settings: Settings, max_connections: int, name: str | None = None) -> Redis:
    """A pooled client of the primary the Sentinels name, found again after a failover
    (a connection that breaks or meets ``READONLY`` is closed; the command is sent once
    more, as ``app.kv.client.open_redis`` explains)."""
    manager = sentinel_manager(settings, name=name)
    client: Redis = manager.master_for(
        settings.redis_sentinel_service,
        redis_class=Redis,
        connection_pool_class=_BlockingSentinelPool,
        max_connections=max_connections,
        timeout=settings.redis_timeout_s,
        retry=Retry(NoBackoff(), retries=1, supported_errors=(RedisConnectionError,)),
    )
    return client


def master_locator(settings: Settings) -> Locator:
    """Where the primary is now, asked of the Sentinels (for the pipelined connection)."""
    manager = sentinel_manager(settings)
    service = settings.redis_sentinel_service

    async def locate() -> tuple[str, int]:
        host, port = await manager.discover_master(service)
        return str(host), int(port)

    return locate
