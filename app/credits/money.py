"""Every credit movement of an account's pools that is not a request's hold (those are
``holds.Holds``: reserve, extend, settle): opening an account, grants, corrections, its status
and low-balance threshold, reads of the pools, and the cap counters a rebuild restores. One
call into a Lua script (``scripts``) per movement, made with the key names of ``KeySpace``
and answered with the typed results of ``outcomes``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app.core.clock import DAY_S, day_tag, utc_day
from app.credits.outcomes import (
    Balance,
    BalanceRead,
    Granted,
    Identity,
    ScriptStatus,
    TakenBack,
    Written,
)
from app.credits.script_args import ScriptArgs
from app.credits.scripts import Scripts
from app.kv.fields import (
    ACCOUNT_ACTIVE,
    ACCOUNT_POOLS,
    NO_CAP,
    AccountField,
    earned_expired,
    pools,
)
from app.kv.layout import KeySpace
from app.store import GrantRecord

GRANT_MARKER_TTL_S = 400 * DAY_S
"""How long a grant id is remembered (a grant retried within it is applied once)."""
SPOTLIGHT_COUNTER_TTL_S = 2 * DAY_S
"""How long a day's reward counter lives (its day and the next, for late readers)."""
OPEN_ACCOUNT = ScriptArgs(
    "open_account",
    "earned",
    "earned_exp",
    "purchased",
    "status",
    "debt",
    replies={1: ScriptStatus.OK, 0: ScriptStatus.DUPLICATE},
)
CORRECT_POOLS = ScriptArgs(
    "correct_pools", "sign", "credits", "earned_part", "earned_exp", "now", "pid"
)
ACCOUNT_STATUS = ScriptArgs("account_status", "status")
BALANCE = ScriptArgs("balance", "now", "pid")
EXPIRE_EARNED = ScriptArgs("expire_earned", "now", "pid")
LOW_BALANCE = ScriptArgs("low_balance", "now", "low")
GRANT = ScriptArgs(
    "grant",
    "now",
    "pool",
    "credits",
    "earned_ttl",
    "daily_limit",
    "marker_ttl",
    "counter_ttl",
    "pid",
    "intent_ttl",
)
TAKE_BACK = ScriptArgs("take_back", "now", "credits", "marker_ttl", "pid")


def ledger_marker(entry: GrantRecord) -> str:
    """The value of an applied ledger entry's marker, as grant.lua and take_back.lua write
    it (a rebuild restores it): ``<applied_at>:<paid>`` for a grant, ``<applied_at>:<taken>:
    <owed>`` for a take-back."""
    at = entry.applied_at or entry.created_at
    if entry.credits - entry.debt_change < 0:
        return f"{at}:{-entry.credits}:{entry.debt_change}"
    return f"{at}:{-entry.debt_change}"


class Money:
    """The accounts' pools over one set of connections (``scripts``: the requests' or the
    background tasks'), beside the ``Holds`` the same connections keep."""

    def __init__(self, scripts: Scripts, layout: KeySpace, *, cap_ttl_s: int) -> None:
        """``cap_ttl_s``: how long a daily cap counter lives (the reserve's own, which
        ``restore_cap_counters`` writes the counters with)."""
        self.scripts = scripts
        self.redis = scripts.redis
        self.layout = layout
        self._cap_ttl = cap_ttl_s
        self._run = scripts.run

    async def open_account(
        self,
        pid: str,
        *,
        earned: int = 0,
        earned_exp: int = 0,
        purchased: int = 0,
        status: str = ACCOUNT_ACTIVE,
        debt: int = 0,
    ) -> Written:
        """Create an account's balance hash, with ``status`` (the durable record's) and
        ``debt``, unless it exists (DUPLICATE: left unchanged)."""
        shard = self.layout.shard(pid)
        created = await self._run(
            "open_account",
            [self.layout.account(shard, pid)],
            OPEN_ACCOUNT(
                earned=earned,
                earned_exp=earned_exp,
                purchased=purchased,
                status=status,
                debt=debt,
            ),
        )
        return Written(OPEN_ACCOUNT.replies[int(created)])

    async def correct_pools(
        self, pid: str, credits: int, *, earned_part: int, earned_exp: int, now: float
    ) -> Written:
        """Add ``credits`` (below 0: take them) to the account's pools, ``earned_part`` of
        them the earned pool's (``earned_exp``: its expiry by the ledger); what rebuild-redis
        finds them off from the ledger; an earned pool past its expiry at ``now`` lapses first
        (its expiry event recorded). ``ACCOUNT_MISSING`` when Redis has no balance hash."""
        sign = "add" if credits > 0 else "take"
        shard = self.layout.shard(pid)
        status, _earned, _purchased = await self._run(
            "correct_pools",
            [self.layout.account(shard, pid), self.layout.events(shard)],
            CORRECT_POOLS(
                sign=sign,
                credits=abs(credits),
                earned_part=earned_part,
                earned_exp=earned_exp,
                now=int(now),
                pid=pid,
            ),
        )
        return Written(ScriptStatus(int(status)))

    async def set_account_status(self, pid: str, status: str) -> Written:
        """Set the account's status (``ACCOUNT_STATUSES``): every key of a disabled account
        is refused from the next request on, by every worker; ``ACCOUNT_MISSING`` (nothing
        written) when Redis has no balance hash of it."""
        shard = self.layout.shard(pid)
        written = await self._run(
            "account_status", [self.layout.account(shard, pid)], ACCOUNT_STATUS(status=status)
        )
        return Written(ScriptStatus(int(written)))

    async def balance(self, ident: Identity, now: float) -> BalanceRead:
        """An account's pools, read through one of its keys (the key's status and the
        account's checked too)."""
        status, earned, earned_exp, purchased, debt = await self._run(
            "balance",
            [
                self.layout.api_key(ident.shard, ident.kid),
                self.layout.account(ident.shard, ident.pid),
            ],
            BALANCE(now=int(now), pid=ident.pid),
        )
        balance = Balance(int(earned), int(earned_exp), int(purchased), int(debt))
        return BalanceRead(ScriptStatus(status), balance)

    async def account_balance(self, pid: str, now: float) -> Balance | None:
        """Pools of an account, read directly (admin paths); None when it does not exist."""
        shard = self.layout.shard(pid)
        fields = [*ACCOUNT_POOLS, AccountField.DEBT]
        *read, debt = await self.redis.hmget(self.layout.account(shard, pid), fields)
        found = pools(read)
        if found is None:
            return None
        earned, exp, purchased = found
        if earned_expired(exp, now):
            earned, exp = 0, 0
        return Balance(earned, exp, purchased, int(debt or 0))

    async def account_balances(
        self, pids: Sequence[str], now: float, *, batch: int = 1000
    ) -> list[Balance | None]:
        """``account_balance`` of each of ``pids``, in order, ``batch`` accounts per round
        trip (pipelines without a transaction: a Cluster's client splits them per node)."""
        fields = [*ACCOUNT_POOLS, AccountField.DEBT]
        found: list[Balance | None] = []
        for start in range(0, len(pids), batch):
            pipe = self.redis.pipeline(transaction=False)
            for pid in pids[start : start + batch]:
                pipe.hmget(self.layout.account(self.layout.shard(pid), pid), fields)
            for *read, debt in await pipe.execute():
                pooled = pools(read)
                if pooled is None:
                    found.append(None)
                    continue
                earned, exp, purchased = pooled
                if earned_expired(exp, now):
                    earned, exp = 0, 0
                found.append(Balance(earned, exp, purchased, int(debt or 0)))
        return found

    async def earned_pool(self, pid: str) -> tuple[int, int]:
        """(earned credits, when they expire: unix seconds, 0 = never) as Redis holds them
        (an expired pool not yet zeroed included)."""
        earned, earned_exp = await self.redis.hmget(
            self.layout.account(self.layout.shard(pid), pid),
            [AccountField.EARNED, AccountField.EARNED_EXP],
        )
        return int(earned or 0), int(earned_exp or 0)

    async def expire_earned(self, pid: str, now: float) -> int:
        """Zero the account's earned pool if it has expired (recording the expiry as the
        other scripts do); the credits that lapsed (0: not expired, or no account)."""
        shard = self.layout.shard(pid)
        _, lapsed = await self._run(
            "expire_earned",
            [self.layout.account(shard, pid), self.layout.events(shard)],
            EXPIRE_EARNED(now=int(now), pid=pid),
        )
        return int(lapsed)

    async def set_low_balance(self, pid: str, low: int | None, now: float) -> Written:
        """Set (None: clear) the account's low-balance threshold; ``ACCOUNT_MISSING`` when
        Redis has no such account."""
        shard = self.layout.shard(pid)
        status, _ = await self._run(
            "low_balance",
            [self.layout.account(shard, pid)],
            LOW_BALANCE(now=int(now), low=NO_CAP if low is None else low),
        )
        return Written(ScriptStatus(status))

    async def grant_applied(self, pid: str, grant_id: str) -> bool:
        """Whether Redis applied the grant ``grant_id`` (its marker, which lives
        ``GRANT_MARKER_TTL_S``)."""
        shard = self.layout.shard(pid)
        return bool(await self.redis.exists(self.layout.grant_marker(shard, grant_id)))

    async def grants_applied(self, entries: Sequence[tuple[str, str]]) -> list[bool]:
        """``grant_applied`` of many (account pid, entry id) pairs, in one round trip (a
        pipeline without a transaction: a Cluster's client splits it per primary)."""
        pipe = self.redis.pipeline(transaction=False)
        for pid, grant_id in entries:
            pipe.exists(self.layout.grant_marker(self.layout.shard(pid), grant_id))
        return [bool(found) for found in await pipe.execute()]

    async def grant(
        self,
        pid: str,
        *,
        pool: str,
        credits: int,
        grant_id: str,
        now: float,
        earned_ttl_s: int = 0,
        daily_limit: int = 0,
        marker_ttl_s: int = GRANT_MARKER_TTL_S,
        intent: tuple[str, int] | None = None,
    ) -> Granted:
        """Add ``credits`` to ``pool`` once per ``grant_id``; also returns when the grant
        was applied (now, or the first time for a ``DUPLICATE``). ``intent``: a spotlight
        intent's id and the seconds it has left, consumed by the grant in the same call
        (``INTENT_USED`` when an earlier grant consumed it; ``ACCOUNT_DISABLED``, nothing
        granted, when the account is disabled)."""
        shard = self.layout.shard(pid)
        day = day_tag(utc_day(now))
        keys = [
            self.layout.account(shard, pid),
            self.layout.grant_marker(shard, grant_id),
            self.layout.spotlight(shard, pid, day),
            self.layout.events(shard),
        ]
        consumed: dict[str, int] = {}
        if intent is not None:
            intent_id, life_s = intent
            keys.append(self.layout.spotlight_intent(shard, intent_id))
            consumed = {"intent_ttl": max(1, life_s)}
        args = GRANT(
            now=int(now),
            pool=pool,
            credits=credits,
            earned_ttl=earned_ttl_s,
            daily_limit=daily_limit,
            marker_ttl=marker_ttl_s,
            counter_ttl=SPOTLIGHT_COUNTER_TTL_S,
            pid=pid,
            **consumed,
        )
        status, earned, earned_exp, purchased, granted_at, debt, paid = await self._run(
            "grant", keys, args
        )
        balance = Balance(int(earned), int(earned_exp), int(purchased), int(debt))
        return Granted(ScriptStatus(status), balance, int(granted_at), int(paid))

    async def take_back(
        self,
        pid: str,
        *,
        credits: int,
        entry_id: str,
        now: float,
        marker_ttl_s: int = GRANT_MARKER_TTL_S,
    ) -> TakenBack:
        """Take ``credits`` (> 0) back once per ``entry_id``: out of the purchased pool,
        then the earned one, the rest owed as debt (take_back.lua)."""
        shard = self.layout.shard(pid)
        keys = [
            self.layout.account(shard, pid),
            self.layout.grant_marker(shard, entry_id),
            self.layout.events(shard),
        ]
        status, earned, earned_exp, purchased, debt, taken, owed, applied_at = await self._run(
            "take_back",
            keys,
            TAKE_BACK(now=int(now), credits=credits, marker_ttl=marker_ttl_s, pid=pid),
        )
        balance = Balance(int(earned), int(earned_exp), int(purchased), int(debt))
        return TakenBack(ScriptStatus(status), balance, int(taken), int(owed), int(applied_at))

    async def restore_cap_counters(self, spent: Mapping[tuple[str, str], int], day: str) -> int:
        """Set the daily cap counters Redis lacks for ``day`` (``YYYY-MM-DD``) from what each
        key lineage spent that day ((pid, cap kid) → credits): a Redis that lost its data must
        not grant a key a second cap. Returns how many were written (an existing counter,
        one a reserve created meanwhile, is kept)."""
        pipe = self.redis.pipeline(transaction=False)
        for (pid, cap_kid), credits in sorted(spent.items()):
            name = self.layout.cap(self.layout.shard(pid), cap_kid, day_tag(day))
            pipe.set(name, credits, ex=self._cap_ttl, nx=True)
        return sum(1 for written in await pipe.execute() if written)
