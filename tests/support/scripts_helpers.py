"""Helpers for the Lua script tests: accounts, keys and a full Redis snapshot."""

from __future__ import annotations

from typing import Any

from redis.asyncio.cluster import RedisCluster

from app.credits.ceilings import NO_CEILING
from app.credits.idempotency import IdempotencyClaim
from app.credits.money import Money
from app.credits.outcomes import Hold, Identity, Refusal, Replay
from app.keys.refusals import refusal_error
from app.kv.fields import API_CHAT
from app.store import KeyRecord
from tests.support.ledgers import Ledgers


async def account(ledger: Ledgers, pid: str, *, purchased: int = 0) -> None:
    await ledger.money.open_account(pid, purchased=purchased)


async def key(
    ledger: Ledgers,
    pid: str,
    kid: str,
    *,
    environment: str = "live",
    cap: int | None = None,
    rpm: int | None = None,
    models: str | None = None,
    lineage: str = "",
    ceiling: int | None = None,
) -> Identity:
    ident = Identity(pid, kid, environment, ledger.layout.shard(pid), lineage)
    await ledger.keys.put_key(ident, rec(ident, cap=cap, rpm=rpm, models=models, ceiling=ceiling))
    return ident


async def reserve(ledger: Ledgers, ident: Identity, rid: str, now: float, **options: Any) -> Hold:
    """``reserved``'s hold, or the API error its refusal means raised (as the streams do)."""
    held = await reserved(ledger, ident, rid, now, **options)
    if isinstance(held, Refusal):
        raise refusal_error(held)
    assert isinstance(held, Hold), held
    return held


async def reserved(
    ledger: Ledgers,
    ident: Identity,
    rid: str,
    now: float,
    *,
    prompt_units: int = 0,
    output_price: int = 1000,
    max_out: int = 10,
    min_out: int | None = None,
    deadline: float | None = None,
    api: str = API_CHAT,
    models: str = "svc-fast",
    claim: IdempotencyClaim | None = None,
    ceiling: int = NO_CEILING,
) -> Hold | Refusal | Replay:
    """Defaults make the arithmetic plain: one credit per output token."""
    return await ledger.holds.reserve(
        ident,
        rid=rid,
        now=now,
        prompt_units=prompt_units,
        output_price=output_price,
        max_out=max_out,
        min_out=max_out if min_out is None else min_out,
        deadline=now + 60 if deadline is None else deadline,
        alias="svc-fast",
        requested="svc-auto",
        models=models,
        claim=claim,
        api=api,
        ceiling=ceiling,
    )


async def snapshot(ledger: Ledgers) -> dict[bytes, Any]:
    """Every key with its type and value: compare two to prove nothing changed."""
    redis = ledger.redis
    out: dict[bytes, Any] = {}
    if isinstance(redis, RedisCluster):
        names = await redis.keys("*", target_nodes=RedisCluster.PRIMARIES)
    else:
        names = await redis.keys("*")
    for name in names:
        kind = (await redis.type(name)).decode()
        if kind == "string":
            out[name] = await redis.get(name)
        elif kind == "hash":
            out[name] = await redis.hgetall(name)
        elif kind == "zset":
            out[name] = await redis.zrange(name, 0, -1, withscores=True)
        elif kind == "list":
            out[name] = await redis.lrange(name, 0, -1)
        elif kind == "stream":
            out[name] = await redis.xlen(name)
        else:
            out[name] = kind
    return out


async def pools(ledger: Ledgers | Money, pid: str) -> tuple[int, int]:
    earned, purchased = await ledger.redis.hmget(
        ledger.layout.account(ledger.layout.shard(pid), pid), ["earned", "purchased"]
    )
    return int(earned), int(purchased)


def rec(
    ident: Identity,
    *,
    status: str = "active",
    cap: int | None = None,
    name: str = "k",
    expires_at: int | None = None,
    rpm: int | None = None,
    models: str | None = None,
    ceiling: int | None = None,
) -> KeyRecord:
    """A key's durable record as the key scripts take it (the secret's hash is not theirs)."""
    return KeyRecord(
        kid=ident.kid,
        account_pid=ident.pid,
        name=name,
        environment=ident.environment,
        daily_cap_credits=cap,
        secret_hash="",
        last4="",
        created_at=0,
        status=status,
        expires_at=expires_at,
        allowed_models=models,
        rate_limit_rpm=rpm,
        max_credits_per_request=ceiling,
        lineage=ident.lineage or None,
    )
