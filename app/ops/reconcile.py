"""``svc admin reconcile``: Redis against the durable ledger, read only.

The durable ledger is the grants (``credit_grants``), the usage rollups with their earned
part (``usage_daily``), the earned credits that lapsed (``credit_expiries``) and the flush
cursors; the events still in a shard's stream after its cursor are the part of the ledger
that only Redis holds yet. Per account, in the live environment (test keys never touch a
balance):

    earned (the stored field, even past earned_exp) + purchased + held by open reservations
      − debt = Σ ledger entries − Σ expiries − Σ usage credits   (durable + unflushed, each)

where a ledger entry counts what it asked (its credits less its debt change: a refund that
found the pools short moved them less and the debt by the rest), once Redis applied it; a
pending entry is counted by neither side until the repair (or its retry) applies it
(``pending_entries`` in the report).

The stored earned field counts even when its expiry has passed: a script that zeroes an
expired pool appends the expiry event in the same atomic call, so until then the credits
are still on both sides. Second check, per account and environment: the all-time usage
counters (``use:<pid>``) = durable rollups + unflushed usage events. Third, the same per
day (``use:<pid>:<YYYYMMDD>`` = that day's rollups + unflushed events of that day) for the
days Redis holds completely: a script that fails half-way can leave a day counter apart
from the all-time one. Fourth, the account's status: Redis's (what the scripts refuse keys
by) must be the durable record's (``PATCH /admin/v1/accounts/{pid}`` writes the store first,
then Redis).
"""

from __future__ import annotations

import msgspec

from app.core.clock import utc_day
from app.kv.client import RedisClient
from app.kv.fields import ACCOUNT_ACTIVE, is_group_field
from app.kv.layout import KeySpace
from app.ops.shard_state import ShardRead, Sums, consistent_shards, redis_accounts
from app.store import Store
from app.usage.reader import epoch_after, first_redis_day, redis_days

PENDING_COUNTED = 10_000  # pending entries counted at most (there are none, as a rule)


class RedisSide(msgspec.Struct):
    earned: int  # the stored field, even past its expiry
    purchased: int
    held: int  # by the account's open live reservations
    total: int  # earned + purchased + held - debt
    status: str = ACCOUNT_ACTIVE  # its hash's (absent: active)
    debt: int = 0  # credits owed


class LedgerSide(msgspec.Struct):
    granted: int
    expired: int  # durable + unflushed
    used: int  # live usage credits, durable + unflushed
    unflushed_used: int
    unflushed_expired: int
    total: int
    status: str = ACCOUNT_ACTIVE  # the durable record's


class AccountCheck(msgspec.Struct):
    account_pid: str
    shard: int
    status: str  # ok | drift | missing_in_redis | missing_in_store
    redis: RedisSide | None
    ledger: LedgerSide | None
    balance_drift: int  # redis total − ledger total
    usage_drift: dict[str, int]  # "<env>:<counter>": redis − ledger, non-zero ones only
    day_drift: dict[str, dict[str, int]]  # "YYYY-MM-DD" -> as usage_drift, for that day


class ReconcileReport(msgspec.Struct):
    object: str
    checked_at: int
    accounts_checked: int
    accounts_with_drift: int
    balance_drift: int  # Σ over the accounts
    unflushed_events: int
    accounts: list[AccountCheck]  # those with drift (every account with ``everything``)
    first_day_checked: str | None  # day counters compared from this day to today; None: none
    pending_entries: int = 0  # ledger entries durable and not yet applied to Redis
    repaired_entries: int = 0  # pending entries ``--repair`` applied before the check
    restored_entries: int = 0  # applied entries Redis had lost, ``--repair`` applied again


def _drift(counted: dict[str, int], ledger: dict[str, int]) -> dict[str, int]:
    """Redis − ledger per "<env>:<counter>", the non-zero ones only."""
    return {
        name: counted.get(name, 0) - ledger.get(name, 0)
        for name in sorted(set(counted) | set(ledger))
        if counted.get(name, 0) != ledger.get(name, 0)
    }


def check_account(
    pid: str, shard: int, state: ShardRead, sums: Sums, known: bool, grouped_from: str = ""
) -> AccountCheck:
    """One account's balances and usage counters (all-time and of the days read; per key
    and per model too from ``grouped_from`` on) against its ledger."""
    pools = state.pools.get(pid)
    held_e, held_p = state.held.get(pid, (0, 0))
    redis_side = None
    if pools is not None:
        earned, purchased = pools
        debt = state.debts.get(pid, 0)
        redis_side = RedisSide(
            earned=earned,
            purchased=purchased,
            held=held_e + held_p,
            total=earned + purchased + held_e + held_p - debt,
            status=state.statuses.get(pid, ACCOUNT_ACTIVE),
            debt=debt,
        )
    ledger_side = None
    if known:
        ledger_side = LedgerSide(
            granted=sums.granted_earned + sums.granted_purchased,
            expired=sums.expired,
            used=sums.used,
            unflushed_used=sums.unflushed_used,
            unflushed_expired=sums.unflushed_expired,
            total=sums.total,
            status=sums.status,
        )
    usage_drift = _drift(state.usage.get(pid, {}), sums.usage)
    # Only the days read from Redis: the ledger's other days (older unflushed events) are
    # outside the window on both sides.
    day_drift = {
        day: of_day
        for day, counted in sorted(state.days.get(pid, {}).items())
        if (of_day := _day_drift(counted, sums.days.get(day, {}), day >= grouped_from))
    }
    drift = (redis_side.total if redis_side else 0) - (ledger_side.total if ledger_side else 0)
    if redis_side is None:
        status = "missing_in_redis"
    elif ledger_side is None:
        status = "missing_in_store"
    else:
        status_drift = redis_side.status != ledger_side.status
        status = "drift" if drift or usage_drift or day_drift or status_drift else "ok"
    return AccountCheck(
        account_pid=pid,
        shard=shard,
        status=status,
        redis=redis_side,
        ledger=ledger_side,
        balance_drift=drift,
        usage_drift=usage_drift,
        day_drift=day_drift,
    )


def _day_drift(counted: dict[str, int], ledger: dict[str, int], grouped: bool) -> dict[str, int]:
    """``_drift`` of a day; a day before the per-key and per-model counters (``grouped``
    False) is compared on the rest."""
    if not grouped:
        counted = {k: v for k, v in counted.items() if not is_group_field(k)}
        ledger = {k: v for k, v in ledger.items() if not is_group_field(k)}
    return _drift(counted, ledger)


async def first_grouped_day(redis: RedisClient, layout: KeySpace, store: Store) -> str:
    """The first day whose day hashes hold per-key and per-model counters (the group
    usage epoch, or the one a server would start)."""
    raw = await redis.get(layout.group_usage_epoch())
    epoch = int(raw) if raw is not None else epoch_after(await store.last_usage_day())
    return utc_day(epoch)


async def complete_usage_days(
    redis: RedisClient, layout: KeySpace, store: Store, *, now: float, retention_s: int
) -> list[str]:
    """The days Redis holds every usage counter of, newest first (``first_redis_day``):
    an older day's hash may have expired, or hold only what came after this Redis's usage
    epoch. Without an epoch (no server started on this Redis since it was new or emptied)
    the one a server would start; reconcile only reads, so it does not set it."""
    raw = await redis.get(layout.usage_epoch())
    epoch = int(raw) if raw is not None else epoch_after(await store.last_usage_day())
    return redis_days(now, first_redis_day(now, epoch, retention_s))


async def reconcile(
    redis: RedisClient,
    layout: KeySpace,
    store: Store,
    *,
    now: float,
    earned_ttl_s: int,
    usage_retention_s: int,
    everything: bool = False,
    repaired_entries: int = 0,
    restored_entries: int = 0,
) -> ReconcileReport:
    """Every account's Redis balance and usage counters against the durable ledger;
    ``usage_retention_s`` is how long a usage day hash lives (``usage_day_ttl_s``)."""
    days = await complete_usage_days(redis, layout, store, now=now, retention_s=usage_retention_s)
    grouped_from = await first_grouped_day(redis, layout, store)
    in_redis = await redis_accounts(redis, layout)
    shards, known = await consistent_shards(redis, layout, store, in_redis, earned_ttl_s, days)
    checks = [
        check_account(pid, shard, state, sums, pid in known, grouped_from)
        for shard, (state, shard_sums) in sorted(shards.items())
        for pid, sums in sorted(shard_sums.items())
        if pid in known or pid in state.pools
    ]
    drifting = [c for c in checks if c.status != "ok"]
    return ReconcileReport(
        object="reconcile_report",
        checked_at=int(now),
        accounts_checked=len(checks),
        accounts_with_drift=len(drifting),
        balance_drift=sum(c.balance_drift for c in checks),
        unflushed_events=sum(len(state.events) for state, _ in shards.values()),
        accounts=checks if everything else drifting,
        first_day_checked=days[-1] if days else None,
        pending_entries=len(await store.list_pending(int(now), PENDING_COUNTED)),
        repaired_entries=repaired_entries,
        restored_entries=restored_entries,
    )
