"""``svc admin reconcile`` and ``svc admin rebuild-redis``: Redis against the durable ledger.

The durable ledger is the grants (``credit_grants``), the usage rollups with their earned
part (``usage_daily``), the earned credits that lapsed (``credit_expiries``) and the flush
cursors; the events still in a shard's stream after its cursor are the part of the ledger
that only Redis holds yet. Per account, in the live environment (test keys never touch a
balance):

    earned (the stored field, even past earned_exp) + purchased + held by open reservations
      = Σ grants − Σ expiries − Σ usage credits        (durable + unflushed, each)

The stored earned field counts even when its expiry has passed: a script that zeroes an
expired pool appends the expiry event in the same atomic call, so until then the credits
are still on both sides. Second check, per account and environment: the all-time usage
counters (``use:<pid>``) = durable rollups + unflushed usage events. Third, the same per
day (``use:<pid>:<YYYYMMDD>`` = that day's rollups + unflushed events of that day) for the
days Redis holds completely: a script that fails half-way can leave a day counter apart
from the all-time one.
"""

from __future__ import annotations

from collections import defaultdict

import msgspec

from app.core.clock import day_tag, utc_day
from app.core.errors import ApiError, ErrorKind
from app.credits.key_records import KeyRecords
from app.credits.money import GRANT_MARKER_TTL_S, SPOTLIGHT_COUNTER_TTL_S, Money
from app.credits.outcomes import ScriptStatus
from app.credits.usage_counts import UsageCounts
from app.kv.client import RedisClient
from app.kv.fields import KIND_MARK, EventField, is_group_field
from app.kv.layout import KeySpace
from app.ops.shard_state import ShardRead, Sums, consistent_shards, redis_accounts
from app.store import KeyRecord, LedgerSnapshot, Store
from app.usage.flusher import next_stream_id
from app.usage.reader import epoch_after, first_redis_day, redis_days

LOST_ON_REBUILD = (
    "Usage events not yet flushed and reservations open when Redis lost its data are gone: "
    "their usage is not recorded and the credits they held are back in the accounts."
)


class RedisSide(msgspec.Struct):
    earned: int  # the stored field, even past its expiry
    purchased: int
    held: int  # by the account's open live reservations
    total: int


class LedgerSide(msgspec.Struct):
    granted: int
    expired: int  # durable + unflushed
    used: int  # live usage credits, durable + unflushed
    unflushed_used: int
    unflushed_expired: int
    total: int


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


class RebuildReport(msgspec.Struct):
    object: str
    rebuilt_at: int
    accounts_restored: int
    accounts_kept: int  # present already (only with --force): left unchanged
    keys_restored: int
    revoked_keys_restored: int
    earned_credits: int
    purchased_credits: int
    earned_already_expired: int  # restored with a past expiry: the next script zeroes it
    grant_markers: int
    spotlight_counters: int
    cap_counters: int  # key lineages' daily cap counters for today, from the durable rollups
    usage_totals: int
    usage_epoch_day: str | None  # first day /v1/usage reads from Redis; older from the store
    negative_balances: list[str]  # accounts whose ledger is below zero (restored as 0)
    lost: str


# -- reconcile ---------------------------------------------------------------------------


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
        redis_side = RedisSide(
            earned=earned,
            purchased=purchased,
            held=held_e + held_p,
            total=earned + purchased + held_e + held_p,
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
        status = "drift" if drift or usage_drift or day_drift else "ok"
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
    )


# -- rebuild -----------------------------------------------------------------------------


def restored_pools(sums: Sums, held: tuple[int, int]) -> tuple[int, int, int]:
    """(earned, earned_exp, purchased) an account's hash should hold by its ledger, less
    what its open reservations hold. Rollups from before the earned split was recorded
    count as purchased; the split is clamped so that neither pool is negative."""
    total = max(0, sums.total - held[0] - held[1])
    earned = sums.granted_earned - sums.used_earned - sums.expired - held[0]
    earned = min(max(0, earned), total)
    exp = (sums.last_earned_expiry or 0) if earned > 0 else 0
    return earned, exp, total - earned


async def rebuild_redis(
    money: Money,
    key_records: KeyRecords,
    usage_counts: UsageCounts,
    store: Store,
    *,
    now: float,
    earned_ttl_s: int,
    force: bool = False,
) -> RebuildReport:
    """Restore accounts, balances, keys, grant markers, today's spotlight and cap counters
    and usage totals from the durable store; refuses a Redis that holds accounts already
    unless ``force`` (then only what is missing is written, existing records are kept)."""
    redis, layout = money.redis, money.layout
    in_redis = await redis_accounts(redis, layout)
    if in_redis and not force:
        raise ApiError(
            ErrorKind.REDIS_NOT_EMPTY,
            f"Redis holds {len(in_redis)} svc account(s) already; rebuild-redis restores an "
            "empty Redis. Use --force to restore only what is missing.",
        )
    shards, known = await consistent_shards(redis, layout, store, set(), earned_ttl_s)
    report = RebuildReport(
        object="rebuild_report",
        rebuilt_at=int(now),
        accounts_restored=0,
        accounts_kept=0,
        keys_restored=0,
        revoked_keys_restored=0,
        earned_credits=0,
        purchased_credits=0,
        earned_already_expired=0,
        grant_markers=0,
        spotlight_counters=0,
        cap_counters=0,
        usage_totals=0,
        usage_epoch_day=None,
        negative_balances=[],
        lost=LOST_ON_REBUILD,
    )
    for shard, (state, shard_sums) in sorted(shards.items()):
        for pid, sums in sorted(shard_sums.items()):
            if pid not in known:
                continue
            await _restore_account(money, report, shard, state, pid, sums, now)
    keys = await store.list_all_keys()
    await _restore_keys(key_records, keys, report)
    for account in await store.list_accounts():
        if account.low_balance_credits is not None:
            await money.set_low_balance(account.pid, account.low_balance_credits, now)
    await _restore_grant_markers(money, store, report, now)
    first_day = epoch_after(await store.last_usage_day())
    epoch = await usage_counts.start_usage_epoch(first_day)
    await usage_counts.start_usage_epoch(first_day, groups=True)
    report.usage_epoch_day = utc_day(epoch) if epoch else None
    snapshot = await store.ledger_snapshot(utc_day(now))
    report.cap_counters = await money.restore_cap_counters(
        spent_today(snapshot, keys, utc_day(now)), utc_day(now)
    )
    await _move_streams_past_cursors(redis, layout, snapshot)
    return report


def spent_today(
    snapshot: LedgerSnapshot, keys: list[KeyRecord], today: str
) -> dict[tuple[str, str], int]:
    """What each key lineage ((pid, cap kid)) has settled on ``today`` by the durable
    rollups, every environment and API: what its daily cap counter held, less the holds
    Redis lost with it (those were refunded)."""
    lineage = {rec.kid: rec.cap_kid for rec in keys}
    spent: dict[tuple[str, str], int] = defaultdict(int)
    for day in snapshot.usage_days:
        if day.day == today and day.credits > 0 and day.kid in lineage:
            spent[(day.account_pid, lineage[day.kid])] += day.credits
    return dict(spent)


async def _restore_account(
    money: Money,
    report: RebuildReport,
    shard: int,
    state: ShardRead,
    pid: str,
    sums: Sums,
    now: float,
) -> None:
    if sums.total - sum(state.held.get(pid, (0, 0))) < 0:
        report.negative_balances.append(pid)
    if pid in state.pools:
        report.accounts_kept += 1
    else:
        earned, exp, purchased = restored_pools(sums, state.held.get(pid, (0, 0)))
        opened = await money.open_account(pid, earned=earned, earned_exp=exp, purchased=purchased)
        if opened.status is ScriptStatus.OK:
            report.accounts_restored += 1
            report.earned_credits += earned
            report.purchased_credits += purchased
            if exp and exp <= now:
                report.earned_already_expired += earned
    usage_key = money.layout.usage_total(shard, pid)
    # HSETNX per field: a counter a settle created meanwhile (--force) is not overwritten.
    if sums.usage and not await money.redis.exists(usage_key):
        pipe = money.redis.pipeline(transaction=True)
        for name, value in sorted(sums.usage.items()):
            pipe.hsetnx(usage_key, name, value)
        await pipe.execute()
        report.usage_totals += 1


async def _restore_keys(
    key_records: KeyRecords, keys: list[KeyRecord], report: RebuildReport
) -> None:
    """Every key's record, revoked ones too (a key Redis does not know would otherwise be
    re-warmed from the store by the cold path anyway; a revoked one must stay revoked).
    The digest mappings need the secrets: the cold path restores each on the key's first
    use (argon2 check against the stored hash)."""
    for rec in keys:
        written = await key_records.put_key(key_records.identity(rec), rec)
        if written.status is ScriptStatus.OK:
            report.keys_restored += 1
            report.revoked_keys_restored += int(rec.status == "revoked")


async def _restore_grant_markers(
    money: Money, store: Store, report: RebuildReport, now: float
) -> None:
    """Grant ids seen (so a retried spotlight view is not rewarded twice) and today's
    spotlight counters (so the daily limit still holds)."""
    layout, today = money.layout, utc_day(now)
    spotlights: dict[str, int] = defaultdict(int)
    pipe = money.redis.pipeline(transaction=False)
    for g in await store.list_grants_since(int(now) - GRANT_MARKER_TTL_S):
        shard = layout.shard(g.account_pid)
        ttl = g.created_at + GRANT_MARKER_TTL_S - int(now)
        if ttl > 0:
            pipe.set(layout.grant_marker(shard, g.grant_id), g.created_at, ex=ttl, nx=True)
        if g.source == "spotlight" and utc_day(g.created_at) == today:
            spotlights[g.account_pid] += 1
    report.grant_markers = sum(1 for ok in await pipe.execute() if ok)
    for pid, count in sorted(spotlights.items()):
        key = layout.spotlight(layout.shard(pid), pid, day_tag(today))
        if await money.redis.set(key, count, ex=SPOTLIGHT_COUNTER_TTL_S, nx=True):
            report.spotlight_counters += 1


async def _move_streams_past_cursors(
    redis: RedisClient, layout: KeySpace, snapshot: LedgerSnapshot
) -> None:
    """Make every new event id land after the shard's durable cursor, even when this
    Redis's clock is behind the lost one's: the flusher skips ids at or below the cursor.
    One entry at the cursor's successor, trimmed by the same command, sets the stream's
    last id; a stream that has entries already (--force) is left alone."""
    for shard, cursor in sorted(snapshot.cursors.items()):
        name = layout.events(shard)
        if await redis.exists(name):
            continue
        await redis.xadd(
            name,
            {EventField.KIND: KIND_MARK},
            id=next_stream_id(cursor),
            maxlen=0,
            approximate=False,
        )
