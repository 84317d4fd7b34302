"""``svc admin rebuild-redis``: Redis written anew from the durable ledger after it lost its
data (``reconcile`` is the read-only comparison, this the repair). What only the lost Redis
held, usage events not yet flushed and open reservations, cannot come back: the report says
so (``LOST_ON_REBUILD``)."""

from __future__ import annotations

from collections import defaultdict

import msgspec

from app.core.clock import day_tag, utc_day
from app.core.errors import ApiError, ErrorKind
from app.credits.key_records import KeyRecords
from app.credits.money import GRANT_MARKER_TTL_S, SPOTLIGHT_COUNTER_TTL_S, Money, ledger_marker
from app.credits.outcomes import ScriptStatus
from app.credits.usage_counts import UsageCounts
from app.kv.client import RedisClient
from app.kv.fields import ACCOUNT_ACTIVE, ACCOUNT_DISABLED
from app.kv.layout import KeySpace
from app.kv.stream_events import KIND_MARK, EventField
from app.ops.recompute import CONFIRM_S, correct_confirmed, differences, restored_pools
from app.ops.shard_state import ShardRead, Sums, consistent_shards, redis_accounts
from app.ops.usage_repair import correct_usage
from app.store import KeyRecord, LedgerSnapshot, Store
from app.usage.flusher import next_stream_id
from app.usage.reader import epoch_after

LOST_ON_REBUILD = (
    "Usage events not yet flushed and reservations open when Redis lost its data are gone: "
    "their usage is not recorded and the credits they held are back in the accounts."
)


class RebuildReport(msgspec.Struct):
    object: str
    rebuilt_at: int
    accounts_restored: int
    accounts_kept: int  # present already (only with --force): left unchanged, but for
    # a status the durable record says otherwise (statuses_corrected)
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
    disabled_accounts: int = 0  # restored disabled, as the durable record says
    statuses_corrected: int = 0  # kept accounts (--force) whose status Redis had wrong
    accounts_recomputed: int = 0  # kept accounts (--force) whose balance reconcile
    # flagged: their pools corrected to the ledger's
    credits_recomputed: int = 0  # Σ (ledger − Redis) over them
    usage_corrected: int = 0  # kept accounts (--force) whose usage counters were not the
    # ledger's (settles Redis lost after the flusher had them): moved to the ledger's
    accounts_changing: list[str] = msgspec.field(default_factory=list)  # flagged, but their
    # difference changed between two reads (a grant in flight): left as they are, run again


async def rebuild_redis(
    money: Money,
    key_records: KeyRecords,
    usage_counts: UsageCounts,
    store: Store,
    *,
    now: float,
    earned_ttl_s: int,
    force: bool = False,
    confirm_s: float = CONFIRM_S,
    usage_retention_s: int | None = None,
) -> RebuildReport:
    """Restore accounts (their status too), balances, keys, grant markers, today's
    spotlight and cap counters and usage totals from the durable store; refuses a Redis
    that holds accounts already unless ``force`` (then only what is missing is written,
    existing records are kept, but for an account's status: the durable record's, and for
    a balance reconcile flags: corrected when a second read ``confirm_s`` later confirms
    its difference, ``app.ops.recompute``; and, given ``usage_retention_s``, usage counters
    reconcile flags, ``app.ops.usage_repair``)."""
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
    corrected = await correct_confirmed(
        money,
        store,
        differences(shards, known),
        now=now,
        earned_ttl_s=earned_ttl_s,
        confirm_s=confirm_s,
    )
    report.accounts_recomputed = corrected.accounts
    report.credits_recomputed = corrected.credits
    report.accounts_changing = corrected.changing
    if force and usage_retention_s is not None:
        report.usage_corrected = await correct_usage(
            redis,
            layout,
            store,
            now=now,
            earned_ttl_s=earned_ttl_s,
            usage_retention_s=usage_retention_s,
        )
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
    """Restore one account; a kept one (--force): its status (its pools, when its balance
    drifts from the ledger: ``correct_confirmed``, after every account)."""
    if sums.total - sum(state.held.get(pid, (0, 0))) < 0:
        report.negative_balances.append(pid)
    if pid in state.pools:
        report.accounts_kept += 1
        # the status is the durable record's: a kept hash that says otherwise is corrected
        if state.statuses.get(pid, ACCOUNT_ACTIVE) != sums.status:
            written = await money.set_account_status(pid, sums.status)
            report.statuses_corrected += int(written.status is ScriptStatus.OK)
    else:
        held = state.held.get(pid, (0, 0))
        earned, exp, purchased = restored_pools(sums, held)
        debt = max(0, sum(held) - sums.total)  # refunds took more than it had: owed
        opened = await money.open_account(
            pid, earned=earned, earned_exp=exp, purchased=purchased, status=sums.status, debt=debt
        )
        if opened.status is ScriptStatus.OK:
            report.accounts_restored += 1
            report.earned_credits += earned
            report.purchased_credits += purchased
            report.disabled_accounts += int(sums.status == ACCOUNT_DISABLED)
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
            pipe.set(layout.grant_marker(shard, g.grant_id), ledger_marker(g), ex=ttl, nx=True)
        if g.kind == "reward" and utc_day(g.created_at) == today:
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
