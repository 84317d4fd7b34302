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
counters (``use:<pid>``) = durable rollups + unflushed usage events.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import msgspec

from app.errors import ApiError, ErrorKind, service_unavailable
from app.flusher import ExpiryEvent, StreamEvent, UsageEvent, next_stream_id, parse_event
from app.ledger import Identity, Ledger, day_tag, utc_day
from app.redis_client import RedisClient
from app.redis_keys import KeySpace, as_text
from app.store import LedgerSnapshot, Store
from app.usage import COUNTERS, epoch_after

MAX_ROUNDS = 20  # durable snapshots before giving up on a flusher that keeps moving
MAX_READS = 50  # reads of one shard before giving up on reservations that keep changing
GRANT_MARKER_TTL_S = 400 * 86_400  # as Ledger.grant's default
SPOTLIGHT_COUNTER_TTL_S = 2 * 86_400
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


class ReconcileReport(msgspec.Struct):
    object: str
    checked_at: int
    accounts_checked: int
    accounts_with_drift: int
    balance_drift: int  # Σ over the accounts
    unflushed_events: int
    accounts: list[AccountCheck]  # those with drift (every account with ``everything``)


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
    usage_totals: int
    usage_epoch_day: str | None  # first day /v1/usage reads from Redis; older from the store
    negative_balances: list[str]  # accounts whose ledger is below zero (restored as 0)
    lost: str


class ShardRead(msgspec.Struct):
    """One instant of one shard in Redis."""

    pools: dict[str, tuple[int, int]]  # pid -> (earned, purchased); absent: no hash
    held: dict[str, tuple[int, int]]  # pid -> (earned, purchased) held, live reservations
    usage: dict[str, dict[str, int]]  # pid -> "<env>:<counter>" -> all-time value
    events: list[StreamEvent]  # after the durable cursor


class Sums(msgspec.Struct):
    """One account's ledger: durable sums plus its unflushed events."""

    granted_earned: int = 0
    granted_purchased: int = 0
    last_earned_grant: int = 0
    last_earned_expiry: int | None = None
    expired: int = 0
    used: int = 0  # live credits
    used_earned: int = 0
    unflushed_used: int = 0
    unflushed_expired: int = 0
    usage: dict[str, int] = msgspec.field(default_factory=dict)  # "<env>:<counter>"

    @property
    def total(self) -> int:
        return self.granted_earned + self.granted_purchased - self.expired - self.used


# -- reading -----------------------------------------------------------------------------


async def redis_accounts(redis: RedisClient, keys: KeySpace) -> set[str]:
    """Every account that has a balance hash in Redis (SCAN: never blocks the server)."""
    head = f"{keys.prefix}:{{s"
    found = set()
    async for name in redis.scan_iter(match=f"{keys.prefix}:{{s*}}:acct:*", count=1000):
        text = as_text(name)
        if text.startswith(head):
            found.add(text.split(":acct:", 1)[1])
    return found


def _by_shard(keys: KeySpace, pids: Iterable[str]) -> dict[int, list[str]]:
    shards: dict[int, list[str]] = defaultdict(list)
    for pid in sorted(set(pids)):
        shards[keys.shard(pid)].append(pid)
    return shards


async def read_shard(
    redis: RedisClient, keys: KeySpace, shard: int, pids: list[str], cursor: str | None
) -> ShardRead:
    """Pools, holds, usage counters and unflushed events of a shard, at one instant.

    All of a shard's keys share one hash tag, so one MULTI reads them atomically (on a
    Cluster too). The reservation ids are read first and again inside the MULTI: when the
    two differ a reservation opened or closed in between, and the shard is read again.
    """
    rsv_key = keys.reservations(shard)
    for _ in range(MAX_READS):
        rids = [as_text(r) for r in await redis.zrange(rsv_key, 0, -1)]
        pipe = redis.pipeline(transaction=True)
        pipe.zrange(rsv_key, 0, -1)
        for pid in pids:
            pipe.hmget(keys.account(shard, pid), ["earned", "purchased"])
            pipe.hgetall(keys.usage_total(shard, pid))
        for rid in rids:
            pipe.hmget(keys.reservation(shard, rid), ["acct", "env", "fe", "fp"])
        pipe.xrange(keys.events(shard), f"({cursor}" if cursor else "-", "+")
        results = await pipe.execute()
        if sorted(as_text(r) for r in results[0]) == sorted(rids):
            return _shard_read(pids, results[1:])
    raise service_unavailable()


def _shard_read(pids: list[str], results: list[Any]) -> ShardRead:
    pools: dict[str, tuple[int, int]] = {}
    usage: dict[str, dict[str, int]] = {}
    for i, pid in enumerate(pids):
        earned, purchased = results[2 * i]
        if purchased is not None:
            pools[pid] = (int(earned or 0), int(purchased))
        usage[pid] = {as_text(k): int(v) for k, v in results[2 * i + 1].items()}
    held: dict[str, tuple[int, int]] = {}
    for row in results[2 * len(pids) : -1]:
        acct, env, fe, fp = row
        if acct is None or as_text(env) != "live":
            continue  # settled between the two reads (then the ids differ), or a test key
        e, p = held.get(as_text(acct), (0, 0))
        held[as_text(acct)] = (e + int(fe), p + int(fp))
    events = [parse_event(entry_id, fields) for entry_id, fields in results[-1] or []]
    return ShardRead(pools=pools, held=held, usage=usage, events=events)


def ledger_sums(snapshot: LedgerSnapshot, earned_ttl_s: int) -> dict[str, Sums]:
    """Durable sums per account."""
    sums: dict[str, Sums] = defaultdict(Sums)
    for account in snapshot.accounts:
        sums[account.pid]  # every account, even one without any grant
    for g in snapshot.grants:
        s = sums[g.account_pid]
        if g.pool == "earned":
            s.granted_earned += g.credits
            s.last_earned_grant = g.last_granted_at
            s.last_earned_expiry = g.last_expires_at or g.last_granted_at + earned_ttl_s
        else:
            s.granted_purchased += g.credits
    for u in snapshot.usage:
        s = sums[u.account_pid]
        for name in COUNTERS:
            s.usage[f"{u.environment}:{name}"] = getattr(u, name)
        if u.environment == "live":
            s.used += u.credits
            s.used_earned += u.earned_credits
    for pid, credits in snapshot.expiries.items():
        sums[pid].expired += credits
    return dict(sums)


def add_unflushed(sums: dict[str, Sums], events: list[StreamEvent]) -> None:
    """Count the events after the durable cursor into the accounts' sums."""
    for e in events:
        s = sums.setdefault(e.account_pid, Sums())
        if isinstance(e, ExpiryEvent):
            s.expired += e.credits
            s.unflushed_expired += e.credits
            continue
        assert isinstance(e, UsageEvent)
        env = e.environment
        for name, value in zip(
            COUNTERS, (1, e.prompt_tokens, e.completion_tokens, e.credits), strict=True
        ):
            s.usage[f"{env}:{name}"] = s.usage.get(f"{env}:{name}", 0) + value
        if env == "live":
            s.used += e.credits
            s.used_earned += e.earned_credits
            s.unflushed_used += e.credits


Shards = dict[int, tuple[ShardRead, dict[str, Sums]]]


async def consistent_shards(
    redis: RedisClient, keys: KeySpace, store: Store, pids: set[str], earned_ttl_s: int
) -> tuple[Shards, set[str]]:
    """Each shard's Redis state with the ledger sums of its accounts (``pids`` and every
    account of the store) at one instant; also the accounts the store knows.

    Race with the flusher: it moves events from a stream into the store (and then trims
    them) between any two reads. The store's sums and cursors come from one read
    transaction; the shard is read atomically with only the entries after that cursor;
    then the cursor is read again. Unchanged, no batch was applied in between (the cursor
    only grows, and entries are trimmed only up to it), so each event was counted exactly
    once. Moved, the shard is read again against a fresh snapshot. This never pauses the
    flusher or takes its lease (a busy shard's lease is only free lease_s after its last
    batch, which would make a pass over 64 shards take minutes); a retry costs one more
    snapshot and one more read of the shards that moved.
    """
    done: Shards = {}
    for _ in range(MAX_ROUNDS):
        snapshot = await store.ledger_snapshot()
        known = {a.pid for a in snapshot.accounts}
        sums = ledger_sums(snapshot, earned_ttl_s)
        shards = _by_shard(keys, pids | set(sums))
        for shard, shard_pids in sorted(shards.items()):
            if shard in done:
                continue
            cursor = snapshot.cursors.get(shard)
            state = await read_shard(redis, keys, shard, shard_pids, cursor)
            if await store.get_cursor(shard) != cursor:
                continue  # the flusher applied a batch meanwhile: again next round
            shard_sums = {pid: sums.get(pid, Sums()) for pid in shard_pids}
            add_unflushed(shard_sums, state.events)
            done[shard] = (state, shard_sums)
        if len(done) == len(shards):
            return done, known
    raise service_unavailable()


# -- reconcile ---------------------------------------------------------------------------


def check_account(pid: str, shard: int, state: ShardRead, sums: Sums, known: bool) -> AccountCheck:
    """One account's balances and usage counters against its ledger."""
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
    counted = state.usage.get(pid, {})
    usage_drift = {
        name: counted.get(name, 0) - sums.usage.get(name, 0)
        for name in sorted(set(counted) | set(sums.usage))
        if counted.get(name, 0) != sums.usage.get(name, 0)
    }
    drift = (redis_side.total if redis_side else 0) - (ledger_side.total if ledger_side else 0)
    if redis_side is None:
        status = "missing_in_redis"
    elif ledger_side is None:
        status = "missing_in_store"
    else:
        status = "drift" if drift or usage_drift else "ok"
    return AccountCheck(
        account_pid=pid,
        shard=shard,
        status=status,
        redis=redis_side,
        ledger=ledger_side,
        balance_drift=drift,
        usage_drift=usage_drift,
    )


async def reconcile(
    redis: RedisClient,
    keys: KeySpace,
    store: Store,
    *,
    now: float,
    earned_ttl_s: int,
    everything: bool = False,
) -> ReconcileReport:
    """Every account's Redis balance and usage counters against the durable ledger."""
    in_redis = await redis_accounts(redis, keys)
    shards, known = await consistent_shards(redis, keys, store, in_redis, earned_ttl_s)
    checks = [
        check_account(pid, shard, state, sums, pid in known)
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
    ledger: Ledger,
    store: Store,
    *,
    now: float,
    earned_ttl_s: int,
    force: bool = False,
) -> RebuildReport:
    """Restore accounts, balances, keys, grant markers, today's spotlight counters and
    usage totals from the durable store; refuses a Redis that holds accounts already
    unless ``force`` (then only what is missing is written, existing records are kept)."""
    redis, keys = ledger.redis, ledger.keys
    in_redis = await redis_accounts(redis, keys)
    if in_redis and not force:
        raise ApiError(
            ErrorKind.REDIS_NOT_EMPTY,
            f"Redis holds {len(in_redis)} svc account(s) already; rebuild-redis restores an "
            "empty Redis. Use --force to restore only what is missing.",
        )
    shards, known = await consistent_shards(redis, keys, store, set(), earned_ttl_s)
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
        usage_totals=0,
        usage_epoch_day=None,
        negative_balances=[],
        lost=LOST_ON_REBUILD,
    )
    for shard, (state, shard_sums) in sorted(shards.items()):
        for pid, sums in sorted(shard_sums.items()):
            if pid not in known:
                continue
            await _restore_account(ledger, report, shard, state, pid, sums, now)
    await _restore_keys(ledger, store, report)
    await _restore_grant_markers(ledger, store, report, now)
    epoch = await ledger.start_usage_epoch(epoch_after(await store.last_usage_day()))
    report.usage_epoch_day = utc_day(epoch) if epoch else None
    await _move_streams_past_cursors(redis, keys, await store.ledger_snapshot())
    return report


async def _restore_account(
    ledger: Ledger,
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
        if await ledger.open_account(pid, earned=earned, earned_exp=exp, purchased=purchased):
            report.accounts_restored += 1
            report.earned_credits += earned
            report.purchased_credits += purchased
            if exp and exp <= now:
                report.earned_already_expired += earned
    usage_key = ledger.keys.usage_total(shard, pid)
    # HSETNX per field: a counter a settle created meanwhile (--force) is not overwritten.
    if sums.usage and not await ledger.redis.exists(usage_key):
        pipe = ledger.redis.pipeline(transaction=True)
        for name, value in sorted(sums.usage.items()):
            pipe.hsetnx(usage_key, name, value)
        await pipe.execute()
        report.usage_totals += 1


async def _restore_keys(ledger: Ledger, store: Store, report: RebuildReport) -> None:
    """Every key's record, revoked ones too (a key Redis does not know would otherwise be
    re-warmed from the store by the cold path anyway; a revoked one must stay revoked).
    The digest mappings need the secrets: the cold path restores each on the key's first
    use (argon2 check against the stored hash)."""
    for rec in await store.list_all_keys():
        ident = Identity(
            rec.account_pid, rec.kid, rec.environment, ledger.keys.shard(rec.account_pid)
        )
        if await ledger.put_key(
            ident, status=rec.status, daily_cap=rec.daily_cap_credits, name=rec.name
        ):
            report.keys_restored += 1
            report.revoked_keys_restored += int(rec.status == "revoked")


async def _restore_grant_markers(
    ledger: Ledger, store: Store, report: RebuildReport, now: float
) -> None:
    """Grant ids seen (so a retried spotlight view is not rewarded twice) and today's
    spotlight counters (so the daily limit still holds)."""
    keys, today = ledger.keys, utc_day(now)
    spotlights: dict[str, int] = defaultdict(int)
    pipe = ledger.redis.pipeline(transaction=False)
    for g in await store.list_grants_since(int(now) - GRANT_MARKER_TTL_S):
        shard = keys.shard(g.account_pid)
        ttl = g.created_at + GRANT_MARKER_TTL_S - int(now)
        if ttl > 0:
            pipe.set(keys.grant_marker(shard, g.grant_id), g.created_at, ex=ttl, nx=True)
        if g.source == "spotlight" and utc_day(g.created_at) == today:
            spotlights[g.account_pid] += 1
    report.grant_markers = sum(1 for ok in await pipe.execute() if ok)
    for pid, count in sorted(spotlights.items()):
        key = keys.spotlight(keys.shard(pid), pid, day_tag(today))
        if await ledger.redis.set(key, count, ex=SPOTLIGHT_COUNTER_TTL_S, nx=True):
            report.spotlight_counters += 1


async def _move_streams_past_cursors(
    redis: RedisClient, keys: KeySpace, snapshot: LedgerSnapshot
) -> None:
    """Make every new event id land after the shard's durable cursor, even when this
    Redis's clock is behind the lost one's: the flusher skips ids at or below the cursor.
    One entry at the cursor's successor, trimmed by the same command, sets the stream's
    last id; a stream that has entries already (--force) is left alone."""
    for shard, cursor in sorted(snapshot.cursors.items()):
        name = keys.events(shard)
        if await redis.exists(name):
            continue
        await redis.xadd(
            name, {"kind": "mark"}, id=next_stream_id(cursor), maxlen=0, approximate=False
        )
