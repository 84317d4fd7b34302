"""``svc admin inspect``: one account as Redis holds it, for operators.

Read-only and straight from Redis (the durable store only names the account's keys):
the account's status and pools, each key's status and cap use today (keys and reservations
name keys by their API id, ``key_…``, as every answer does), open reservations, usage
counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec

from app.core.clock import day_tag, utc_day
from app.core.errors import account_not_found
from app.keys.format import public_id
from app.kv.client import RedisClient
from app.kv.fields import (
    ACCOUNT_POOLS,
    AccountField,
    KeyField,
    ReservationField,
    account_status,
    allowed_models,
    pools,
)
from app.kv.layout import KeySpace, as_text
from app.store import Store


class KeyState(msgspec.Struct):
    id: str
    environment: str
    status: str  # in Redis: active | revoked | missing (Redis lost the record)
    daily_cap_credits: int | None
    cap_used_today: int  # credits held + settled today (by its rotation lineage)
    expires_at: int | None = None  # unix seconds, as Redis holds it; None: never
    allowed_models: list[str] | None = None  # as Redis holds them; None: all
    rate_limit_rpm: int | None = None  # as Redis holds it; None: no limit
    max_credits_per_request: int | None = None  # as Redis holds it; None: no ceiling
    last_used_at: int | None = None  # unix seconds of its last reserve
    replaces: str | None = None  # the id of the key it was rotated from


class Reservation(msgspec.Struct):
    id: str
    key_id: str
    amount: int
    earned: int
    purchased: int
    alias: str
    deadline: int


class AccountReport(msgspec.Struct):
    account_pid: str
    external_id: str | None  # the store's: the app's own id of the account; None: none
    shard: int
    status: str  # in Redis: active | disabled (its keys refused) | missing (no hash)
    earned: int
    earned_expires_at: int  # unix seconds; 0 while the pool is empty
    purchased: int
    debt: int  # credits owed (a refund or a debit found the pools short)
    keys: list[KeyState]
    open_reservations: list[Reservation]
    usage_today: dict[str, int]
    usage_total: dict[str, int]


_KEY_FIELDS = [
    KeyField.STATUS,
    KeyField.CAP,
    KeyField.EXPIRES,
    KeyField.MODELS,
    KeyField.RATE_LIMIT,
    KeyField.CEILING,
    KeyField.LAST_USED,
]


def _positive(raw: Any) -> int | None:
    return int(raw) if raw and int(raw) > 0 else None


def _ints(raw: dict[Any, Any]) -> dict[str, int]:
    return {as_text(k): int(v) for k, v in sorted(raw.items())}


async def inspect_account(
    redis: RedisClient,
    layout: KeySpace,
    store: Store,
    pid: str,
    clock: Callable[[], float] = time.time,
) -> AccountReport:
    """The account's state in Redis; 404 when the durable store does not know it."""
    record = await store.get_account(pid)
    if record is None:
        raise account_not_found(pid)
    shard, today = layout.shard(pid), day_tag(utc_day(clock()))
    records = await store.list_keys(pid)
    pipe = redis.pipeline(transaction=False)
    pipe.hmget(layout.account(shard, pid), [*ACCOUNT_POOLS, AccountField.STATUS, AccountField.DEBT])
    for rec in records:
        pipe.hmget(layout.api_key(shard, rec.kid), _KEY_FIELDS)
        pipe.get(layout.cap(shard, rec.cap_kid, today))

    pipe.zrange(layout.reservations(shard), 0, -1)
    pipe.hgetall(layout.usage_day(shard, pid, today))
    pipe.hgetall(layout.usage_total(shard, pid))
    results = await pipe.execute()
    *pool_fields, account, debt = results[0]
    found = pools(pool_fields)
    earned, earned_exp, purchased = found or (0, 0, 0)
    states = []
    for i, rec in enumerate(records):
        fields, used = results[1 + 2 * i], results[2 + 2 * i]
        status, cap, expires, models, rpm, ceiling, last_used = fields
        states.append(
            KeyState(
                id=public_id(rec.kid),
                environment=rec.environment,
                status=as_text(status) if status is not None else "missing",
                daily_cap_credits=None if cap is None or int(cap) < 0 else int(cap),
                cap_used_today=int(used or 0),
                expires_at=_positive(expires),
                allowed_models=allowed_models(models),
                rate_limit_rpm=_positive(rpm),
                max_credits_per_request=_positive(ceiling),
                last_used_at=_positive(last_used),
                replaces=None if rec.replaces is None else public_id(rec.replaces),
            )
        )
    rids, usage_today, usage_total = results[-3:]
    return AccountReport(
        account_pid=pid,
        external_id=record.external_id,
        shard=shard,
        status="missing" if found is None else account_status(account),
        earned=earned,
        earned_expires_at=earned_exp,
        purchased=purchased,
        debt=int(debt or 0),
        keys=states,
        open_reservations=await _reservations(redis, layout, shard, pid, rids),
        usage_today=_ints(usage_today),
        usage_total=_ints(usage_total),
    )


async def _reservations(
    redis: RedisClient, layout: KeySpace, shard: int, pid: str, rids: list[Any]
) -> list[Reservation]:
    fields = [
        ReservationField.ACCOUNT,
        ReservationField.KEY,
        ReservationField.AMOUNT,
        ReservationField.FROM_EARNED,
        ReservationField.FROM_PURCHASED,
        ReservationField.ALIAS,
        ReservationField.DEADLINE,
    ]
    pipe = redis.pipeline(transaction=False)
    for rid in rids:
        pipe.hmget(layout.reservation(shard, as_text(rid)), fields)
    found = []
    for rid, row in zip(rids, await pipe.execute(), strict=True):
        if row[0] is None or as_text(row[0]) != pid:
            continue  # another account of the shard, or settled meanwhile
        _acct, kid, amount, fe, fp, alias, deadline = row
        found.append(
            Reservation(
                id=as_text(rid),
                key_id=public_id(as_text(kid)),
                amount=int(amount),
                earned=int(fe),
                purchased=int(fp),
                alias=as_text(alias),
                deadline=int(deadline),
            )
        )
    return found
