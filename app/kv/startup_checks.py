"""What ``svc serve`` and each worker ask of a Redis before serving from it: that it answers
(``svc serve`` only) and that it never evicts keys (a balance or a cap counter evicted under
memory pressure is money lost or a cap lifted). Each refusal is a ``StartupError`` that says
what to change; the URL it names keeps no user or password (``where``).

``app.runtime.open_services`` runs them once it has opened its clients.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from app.core.errors import StartupError
from app.kv.client import REDIS_ERRORS, RedisClient, primaries_info

log = logging.getLogger("svc.runtime")  # the start-up's name, as operators' filters know it


async def check_redis_answers(redis: RedisClient, url: str) -> None:
    """Raise ``StartupError`` unless Redis answers PING (within ``SVC_REDIS_TIMEOUT_S``,
    and with the URL's credentials)."""
    try:
        await redis.ping()
    except REDIS_ERRORS as exc:
        reason = " ".join(str(exc).split()).rstrip(".") or type(exc).__name__
        raise StartupError(
            f"Redis at {where(url)} did not answer or refused svc ({reason}). Check that it "
            "runs, and SVC_REDIS_URL (or SVC_REDIS_SENTINELS): its address, user and password"
        ) from exc


def where(url: str) -> str:
    """A server's URL for a message: scheme, host, port and path, never a user, password
    or query (``?password=`` is a redis-py option)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


async def check_eviction_policy(redis: RedisClient, *, allow: bool) -> None:
    """Refuse a Redis that may evict keys: a balance or a cap counter evicted under memory
    pressure is money lost or a cap lifted. Every primary of a cluster is asked. A Redis
    that cannot be reached now is not checked (the requests will fail closed until it
    answers)."""
    try:
        infos = await primaries_info(redis, "memory")
    except REDIS_ERRORS:
        log.warning("could not read Redis's maxmemory-policy; not checked")
        return
    policies = {str(info.get("maxmemory_policy", "noeviction")) for info in infos}
    policy = ", ".join(sorted(policies - {"noeviction"}))
    if policy and not allow:
        raise StartupError(
            f"Redis runs with maxmemory-policy {policy}: it may evict balances and cap "
            "counters. Set it to noeviction, or set SVC_ALLOW_EVICTING_REDIS=true to run anyway."
        )
