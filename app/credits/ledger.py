"""The money path: every credit movement is one call into a Lua script (``scripts``), made
here with the key names of ``KeySpace`` and answered with the typed results of
``outcomes``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from app.core.clock import DAY_S, day_tag, utc_day
from app.credits import idempotency
from app.credits.idempotency import IdempotencyClaim, RecordedAnswer, RecordedResponse
from app.credits.outcomes import (
    Balance,
    BalanceRead,
    Granted,
    Hold,
    Identity,
    KeyAccess,
    ScriptStatus,
    Settlement,
    Written,
    idempotency_refusal,
    reserve_refusal,
)
from app.credits.scripts import RedisClock, Scripts
from app.kv.client import REDIS_TIMEOUT, RedisClient
from app.kv.fields import (
    ACCOUNT_POOLS,
    ALL_MODELS,
    API_CHAT,
    APIS,
    COUNTERS,
    KEY_ACTIVE,
    NOTHING_SERVED,
    AccountField,
    KeyField,
    ReservationField,
    Served,
    UsageCounters,
    group_counters,
    pools,
    usage_field,
)
from app.kv.layout import KeySpace, as_text
from app.kv.pipelined import PipelinedRedis
from app.store import KeyRecord

NO_CAP = -1
NEVER = 0  # a key's exp in Redis when it does not expire
NO_RATE_LIMIT = 0  # a key's rpm in Redis when it has no rate limit


def key_expired(expires_at: int, now: float) -> bool:
    """The scripts' rule, for the reads made outside them: a key with an expiry is expired
    from that second on."""
    return expires_at != NEVER and now >= expires_at


def _key_fields(record: KeyRecord) -> list[Any]:
    """The settings of a key as the key scripts take them (lib/checks.lua key_record)."""
    cap = NO_CAP if record.daily_cap_credits is None else record.daily_cap_credits
    expires = NEVER if record.expires_at is None else record.expires_at
    models = ALL_MODELS if record.allowed_models is None else f" {record.allowed_models} "
    return [cap, record.name, expires, models, record.rate_limit_rpm or NO_RATE_LIMIT]


REPLY_MARGIN = 0.1  # the part of the Redis timeout a reserve's reply may take to come back
GRANT_MARKER_TTL_S = 400 * DAY_S
"""How long a grant id is remembered (a grant retried within it is applied once)."""
SPOTLIGHT_COUNTER_TTL_S = 2 * DAY_S
"""How long a day's reward counter lives (its day and the next, for late readers)."""
SWEPT_FIELDS = [  # what the sweeper needs of a reservation
    ReservationField.ACCOUNT,
    ReservationField.KEY,
    ReservationField.DAY,
    ReservationField.AMOUNT,
    ReservationField.ENVIRONMENT,
    ReservationField.CAP_KEY,
    ReservationField.IDEMPOTENCY,
]


class KeyUse(NamedTuple):
    """What Redis knows of a key's use (Redis only: a Redis that lost its data forgets it)."""

    last_used: int | None  # unix seconds of its last reservation; None: never
    today: int  # credits its lineage holds and has settled today (UTC): its daily cap's count


class WindowCount(NamedTuple):
    """A client address's attempts in a window shared by every worker and instance."""

    attempts: int  # this one included
    left_s: float  # until the window ends


class RedisLedger:
    """Typed calls into the scripts, with the key names of ``KeySpace``."""

    def __init__(
        self,
        redis: RedisClient,
        layout: KeySpace,
        *,
        cap_ttl_s: int,
        usage_ttl_s: int,
        command_timeout_s: float | None = None,
        redis_clock: RedisClock | None = None,
        script_calls: PipelinedRedis | None = None,
    ) -> None:
        """``command_timeout_s``: how long the client waits for Redis's reply (its socket
        timeout); a reserve that Redis runs later than that holds nothing. None: no limit.
        ``script_calls``: the connection the scripts go out on, when not ``redis``'s pool."""
        self.redis = redis
        self.layout = layout
        self._cap_ttl = cap_ttl_s
        self._usage_ttl = usage_ttl_s
        self._command_timeout_s = command_timeout_s
        self.redis_clock = redis_clock or RedisClock()
        self.scripts = Scripts(redis, script_calls)
        self._run = self.scripts.run

    async def sync_clock(self) -> float:
        """Measure how far Redis's clock is from this host's (a reserve's give-up time is
        compared with Redis's TIME); returns the offset in seconds. Called at start-up and
        by the sweeper's rounds, so a drifting clock is followed."""
        return await self.redis_clock.sync(self.redis)

    def _give_up_ms(self) -> int:
        """Redis's TIME, in ms, after which a reserve holds nothing: this worker waits
        ``command_timeout_s`` for the reply, and the last ``REPLY_MARGIN`` of that is kept
        for the reply's way back. A reserve run just before its caller's deadline would
        otherwise hold credits for a caller whose reply came too late (a resumed Redis
        answers a backlog of commands, and every reply waits for the ones before it)."""
        if self._command_timeout_s is None:
            return 0
        waits = self._command_timeout_s * (1 - REPLY_MARGIN)
        return int((self.redis_clock.now() + waits) * 1000)

    # -- identities ---------------------------------------------------------------------

    def identity(self, record: KeyRecord) -> Identity:
        """Who the key of ``record`` is (to the hot path)."""
        pid = record.account_pid
        shard = self.layout.shard(pid)
        return Identity(pid, record.kid, record.environment, shard, record.lineage or "")

    async def lookup_digest(self, key_digest: str) -> Identity | None:
        raw = await self.redis.get(self.layout.digest(key_digest))
        if raw is None:
            return None
        return Identity.decode(as_text(raw), self.layout.shard)

    async def map_digest(self, key_digest: str, ident: Identity) -> None:
        await self.redis.set(self.layout.digest(key_digest), ident.encode())

    async def key_status(self, ident: Identity, now: float) -> ScriptStatus:
        """Whether the key may be used at ``now`` (read on every authenticated request)."""
        return (await self.key_access(ident, now)).status

    async def key_access(self, ident: Identity, now: float) -> KeyAccess:
        """Whether the key may be used at ``now``, and the models it may use."""
        acct, status, expires, models = await self.redis.hmget(
            self.layout.api_key(ident.shard, ident.kid),
            [KeyField.ACCOUNT, KeyField.STATUS, KeyField.EXPIRES, KeyField.MODELS],
        )
        allowed = None
        if models is not None and as_text(models) != ALL_MODELS:
            allowed = frozenset(as_text(models).split())
        if acct is None or as_text(acct) != ident.pid:
            return KeyAccess(ScriptStatus.KEY_UNKNOWN, allowed)
        if status != KEY_ACTIVE:
            return KeyAccess(ScriptStatus.KEY_REVOKED, allowed)
        if key_expired(int(expires or 0), now):
            return KeyAccess(ScriptStatus.KEY_EXPIRED, allowed)
        return KeyAccess(ScriptStatus.OK, allowed)

    async def keys_use(self, pid: str, records: Sequence[KeyRecord], now: float) -> list[KeyUse]:
        """How each key of ``pid`` is being used, in the order of ``records``, one round
        trip: its last reservation and its lineage's daily cap counter today (UTC)."""
        shard, today = self.layout.shard(pid), day_tag(utc_day(now))
        pipe = self.redis.pipeline(transaction=False)
        for record in records:
            pipe.hget(self.layout.api_key(shard, record.kid), KeyField.LAST_USED)
            pipe.get(self.layout.cap(shard, record.cap_kid, today))
        replies = await pipe.execute()
        return [
            KeyUse(None if used is None else int(used), int(counted or 0))
            for used, counted in zip(replies[::2], replies[1::2], strict=True)
        ]

    async def usage_days(
        self, pid: str, environment: str, days: list[str]
    ) -> dict[str, UsageCounters]:
        """The usage counters of an account for each day (``YYYY-MM-DD``), one round trip."""
        shard = self.layout.shard(pid)
        fields = [usage_field(environment, name) for name in COUNTERS]
        pipe = self.redis.pipeline(transaction=False)
        for day in days:
            pipe.hmget(self.layout.usage_day(shard, pid, day_tag(day)), fields)
        rows = await pipe.execute()
        return {
            day: UsageCounters(*(int(v or 0) for v in row))
            for day, row in zip(days, rows, strict=True)
        }

    async def usage_days_by_api(
        self, pid: str, environment: str, days: list[str]
    ) -> dict[str, dict[str, UsageCounters]]:
        """The usage counters of an account for each day, per API (every one of ``APIS``;
        chat's are the day's less the other APIs'), one round trip."""
        shard = self.layout.shard(pid)
        fields = [usage_field(environment, name, api) for api in APIS for name in COUNTERS]
        pipe = self.redis.pipeline(transaction=False)
        for day in days:
            pipe.hmget(self.layout.usage_day(shard, pid, day_tag(day)), fields)
        rows = await pipe.execute()
        width = len(COUNTERS)
        by_day: dict[str, dict[str, UsageCounters]] = {}
        for day, row in zip(days, rows, strict=True):
            values = [int(v or 0) for v in row]
            per_api = {
                api: UsageCounters(*values[i * width : (i + 1) * width])
                for i, api in enumerate(APIS)
            }
            # the first fields are the day's (chat's name): chat's part is what is left
            chat = per_api[API_CHAT]
            for api in APIS[1:]:
                chat = chat.minus(per_api[api])
            per_api[API_CHAT] = chat
            by_day[day] = per_api
        return by_day

    async def usage_days_grouped(
        self, pid: str, environment: str, days: list[str], group: str
    ) -> dict[str, dict[str, UsageCounters]]:
        """The usage counters of an account for each day, per value of ``group`` (one of
        ``GROUPS``: per key, or per model served) that served requests, one round trip."""
        shard = self.layout.shard(pid)
        pipe = self.redis.pipeline(transaction=False)
        for day in days:
            pipe.hgetall(self.layout.usage_day(shard, pid, day_tag(day)))
        rows = await pipe.execute()
        return {
            day: group_counters({as_text(k): int(v) for k, v in row.items()}, environment, group)
            for day, row in zip(days, rows, strict=True)
        }

    async def usage_epoch(self, *, groups: bool = False) -> int | None:
        """The first day (unix seconds at its 00:00 UTC) this Redis holds complete usage
        counters for (``groups``: per-key and per-model counters too); None when it was
        never set (a new or emptied Redis)."""
        raw = await self.redis.get(self._epoch_key(groups))
        return None if raw is None else int(raw)

    async def start_usage_epoch(self, first_day: int, *, groups: bool = False) -> int:
        """Set the epoch unless set already; returns the epoch in force."""
        key = self._epoch_key(groups)
        await self.redis.set(key, first_day, nx=True)
        return int(await self.redis.get(key) or first_day)

    def _epoch_key(self, groups: bool) -> str:
        return self.layout.group_usage_epoch() if groups else self.layout.usage_epoch()

    # -- accounts and keys --------------------------------------------------------------

    async def open_account(
        self, pid: str, *, earned: int = 0, earned_exp: int = 0, purchased: int = 0
    ) -> Written:
        """Create an account's balance hash unless it exists (DUPLICATE: left unchanged)."""
        shard = self.layout.shard(pid)
        created = await self._run(
            "open_account", [self.layout.account(shard, pid)], [earned, earned_exp, purchased]
        )
        return Written(ScriptStatus.OK if created else ScriptStatus.DUPLICATE)

    async def put_key(self, ident: Identity, record: KeyRecord) -> Written:
        """Write a key's hot-path record (status, cap, name, expiry of ``record``) unless one
        exists (DUPLICATE: left unchanged, so a late re-warm can never undo a revocation)."""
        written = await self._run(
            "put_key",
            [self.layout.api_key(ident.shard, ident.kid)],
            [ident.pid, record.status, ident.environment, *_key_fields(record)],
        )
        return Written(ScriptStatus.OK if written else ScriptStatus.DUPLICATE)

    async def update_key(self, ident: Identity, record: KeyRecord) -> Written:
        """Set a key's name, daily cap and expiry to ``record``'s (its status stays as Redis
        has it; ``record.status`` is written only when Redis lost the record): OK, or
        KEY_UNKNOWN when the record names another account (nothing changed)."""
        result = int(
            await self._run(
                "update_key",
                [self.layout.api_key(ident.shard, ident.kid)],
                [ident.pid, record.status, ident.environment, *_key_fields(record)],
            )
        )
        return Written(ScriptStatus.OK if result == 1 else ScriptStatus.KEY_UNKNOWN)

    async def revoke_key(self, ident: Identity, record: KeyRecord) -> Written:
        """Mark a key revoked: OK now, DUPLICATE when it was already, KEY_UNKNOWN when the
        record names another account (nothing changed)."""
        result = int(
            await self._run(
                "revoke_key",
                [self.layout.api_key(ident.shard, ident.kid)],
                [ident.pid, ident.environment, *_key_fields(record)],
            )
        )
        statuses = {1: ScriptStatus.OK, 0: ScriptStatus.DUPLICATE}
        return Written(statuses.get(result, ScriptStatus.KEY_UNKNOWN))

    # -- idempotency keys of the routes other than the streams -------------------------

    async def claim_idempotency(self, claim: IdempotencyClaim, token: str) -> RecordedAnswer | None:
        """Claim ``claim``'s key for the run ``token`` (None; the claim lapses after
        ``RUNNING_TTL_S`` unless closed), or the answer its first request recorded; raises
        the 409 or 422 when it is running or was another request's."""
        state, *answer = await self._run(
            "idempotency_claim",
            [claim.record],
            [claim.fingerprint, token, idempotency.RUNNING_TTL_S],
        )
        if state == 0:
            return None
        if state == ScriptStatus.REPLAY:
            body, status = answer
            return RecordedAnswer(int(status), bytes(body))
        refusal = idempotency_refusal(ScriptStatus(state))
        if refusal is None:
            raise RuntimeError(f"idempotency_claim answered {state}")  # never: its header
        raise refusal

    async def close_idempotency(
        self, claim: IdempotencyClaim, token: str, answer: RecordedAnswer | None
    ) -> None:
        """Record the answer of the run ``token`` for ``claim``'s key, or (None: it failed)
        free the key."""
        args: list[Any] = [token, "failed"]
        if answer is not None:
            args = [token, "done", answer.status, answer.body, idempotency.TTL_S]
        await self._run("idempotency_close", [claim.record], args)

    # -- credits ------------------------------------------------------------------------

    async def balance(self, ident: Identity, now: float) -> BalanceRead:
        """An account's pools, read through one of its keys (the key's status checked too)."""
        status, earned, earned_exp, purchased = await self._run(
            "balance",
            [
                self.layout.api_key(ident.shard, ident.kid),
                self.layout.account(ident.shard, ident.pid),
            ],
            [int(now), ident.pid],
        )
        return BalanceRead(
            ScriptStatus(status), Balance(int(earned), int(earned_exp), int(purchased))
        )

    async def account_balance(self, pid: str, now: float) -> Balance | None:
        """Pools of an account, read directly (admin paths); None when it does not exist."""
        shard = self.layout.shard(pid)
        found = pools(await self.redis.hmget(self.layout.account(shard, pid), ACCOUNT_POOLS))
        if found is None:
            return None
        earned, exp, purchased = found
        if exp and now >= exp:
            earned, exp = 0, 0
        return Balance(earned, exp, purchased)

    async def expire_earned(self, pid: str, now: float) -> int:
        """Zero the account's earned pool if it has expired (recording the expiry as the
        other scripts do); the credits that lapsed (0: not expired, or no account)."""
        shard = self.layout.shard(pid)
        _, lapsed = await self._run(
            "expire_earned",
            [self.layout.account(shard, pid), self.layout.events(shard)],
            [int(now), pid],
        )
        return int(lapsed)

    async def count_failed_auth(self, address: str, window_s: float) -> WindowCount:
        """One more failed authentication of ``address`` in its window (every worker's)."""
        return await self._window_count(self.layout.failed_auths(address), window_s)

    async def count_cold_auth(self, address: str) -> WindowCount:
        """One more cold-path verification of ``address`` in the current second."""
        return await self._window_count(self.layout.cold_auths(address), 1.0)

    async def _window_count(self, counter: str, window_s: float) -> WindowCount:
        attempts, ms_left = await self._run(
            "window_count", [counter], [max(1, round(window_s * 1000))]
        )
        return WindowCount(int(attempts), int(ms_left) / 1000)

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

    async def set_low_balance(self, pid: str, low: int | None, now: float) -> Written:
        """Set (None: clear) the account's low-balance threshold; ``ACCOUNT_MISSING`` when
        Redis has no such account."""
        shard = self.layout.shard(pid)
        status, _ = await self._run(
            "low_balance",
            [self.layout.account(shard, pid)],
            [int(now), NO_CAP if low is None else low],
        )
        return Written(ScriptStatus(status))

    async def earned_pool(self, pid: str) -> tuple[int, int]:
        """(earned credits, when they expire: unix seconds, 0 = never) as Redis holds them
        (an expired pool not yet zeroed included)."""
        earned, earned_exp = await self.redis.hmget(
            self.layout.account(self.layout.shard(pid), pid),
            [AccountField.EARNED, AccountField.EARNED_EXP],
        )
        return int(earned or 0), int(earned_exp or 0)

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
    ) -> Granted:
        """Add ``credits`` to ``pool`` once per ``grant_id``; also returns when the grant
        was applied (now, or the first time for a ``DUPLICATE``)."""
        shard = self.layout.shard(pid)
        day = day_tag(utc_day(now))
        status, earned, earned_exp, purchased, granted_at = await self._run(
            "grant",
            [
                self.layout.account(shard, pid),
                self.layout.grant_marker(shard, grant_id),
                self.layout.spotlight(shard, pid, day),
                self.layout.events(shard),
            ],
            [
                int(now),
                pool,
                credits,
                earned_ttl_s,
                daily_limit,
                marker_ttl_s,
                SPOTLIGHT_COUNTER_TTL_S,
                pid,
            ],
        )
        balance = Balance(int(earned), int(earned_exp), int(purchased))
        return Granted(ScriptStatus(status), balance, int(granted_at))

    async def reserve(
        self,
        ident: Identity,
        *,
        rid: str,
        now: float,
        prompt_units: int,
        output_price: int,
        max_out: int,
        min_out: int,
        deadline: float,
        alias: str,
        requested: str,
        models: str,
        api: str = API_CHAT,
        claim: IdempotencyClaim | None = None,
    ) -> Hold:
        """Hold credits for one request, or raise the ``ApiError`` the script's refusal means
        (``models``: the aliases the key must allow, space-separated). With ``claim`` (an
        Idempotency-Key), ``Replayed`` when the key's request has finished already.

        Safe to send again (redis-py retries a command whose reply timed out): a reserve of
        a rid that is held already answers that reservation."""
        day = utc_day(now)
        shard = ident.shard
        cap_key = self.layout.cap(shard, ident.cap_kid, day_tag(day))
        keys = [
            self.layout.account(shard, ident.pid),
            self.layout.api_key(shard, ident.kid),
            cap_key,
            self.layout.reservation(shard, rid),
            self.layout.reservations(shard),
            self.layout.events(shard),
            self.layout.rate(shard, ident.cap_kid),
        ]
        extra: list[Any] = []
        if claim is not None:
            keys.append(claim.record)
            extra = [claim.fingerprint, idempotency.TTL_S]
        status, amount, out_tokens, balance, *replayed = await self._run(
            "reserve",
            keys,
            [
                int(now),
                rid,
                ident.pid,
                ident.kid,
                prompt_units,
                output_price,
                max_out,
                min_out,
                int(deadline),
                self._cap_ttl,
                alias,
                requested,
                day,
                round(now * 1000),
                models,
                self._give_up_ms(),
                api,
                *extra,
            ],
        )
        if status == ScriptStatus.REPLAY:
            raise idempotency.Replayed(bytes(replayed[0]))
        if status not in (ScriptStatus.OK, ScriptStatus.DUPLICATE) or not amount:
            refused = ScriptStatus(status)
            raise reserve_refusal(refused, int(balance), now, requested=requested, alias=alias)
        return Hold(
            rid=rid,
            shard=shard,
            pid=ident.pid,
            kid=ident.kid,
            day=day,
            amount=int(amount),
            out_tokens=int(out_tokens),
            balance=int(balance),
            environment=ident.environment,
            cap_key=cap_key,
            idempotency=None if claim is None else claim.record,
        )

    async def settle(
        self,
        hold: Hold,
        *,
        now: float,
        credits_used: int,
        prompt_tokens: int,
        completion_tokens: int,
        outcome: str,
        only_if_expired: bool = False,
        served: Served = NOTHING_SERVED,
        response: RecordedResponse | None = None,
    ) -> Settlement:
        """Close a reservation at its actual cost; a second call changes nothing.
        ``served``: what its activity row tells. For a request with an Idempotency-Key,
        ``response`` is what its record keeps (None: not kept).

        Like ``reserve``, a settle that Redis runs after this worker stopped waiting for it
        changes nothing (``GAVE_UP``): its stream told the client nothing was charged, and
        the sweeper refunds the hold at its deadline. The sweeper's own calls
        (``only_if_expired``) have no such limit: nobody waits on them."""
        shard, tag = hold.shard, day_tag(hold.day)
        keys = [
            self.layout.reservation(shard, hold.rid),
            self.layout.reservations(shard),
            self.layout.account(shard, hold.pid),
            hold.cap_key,
            self.layout.usage_day(shard, hold.pid, tag),
            self.layout.usage_total(shard, hold.pid),
            self.layout.events(shard),
        ]
        args: list[Any] = [
            int(now),
            hold.rid,
            credits_used,
            prompt_tokens,
            completion_tokens,
            outcome,
            1 if only_if_expired else 0,
            self._usage_ttl,
            served.text(),
            0 if only_if_expired else self._give_up_ms(),
        ]
        if hold.idempotency is not None:
            keys.append(hold.idempotency)
            parts = response.parts if response is not None else None
            args += ["unrecorded"] if parts is None else ["body", *parts]
        status, used, balance = await self._run("settle", keys, args)
        if status == ScriptStatus.GAVE_UP:
            # the reply came within the timeout, but the script ran past the give-up time:
            # to the caller this is the timeout it guards against (nothing was charged)
            raise REDIS_TIMEOUT("settle reached Redis after its caller's give-up time")
        return Settlement(ScriptStatus(status), int(used), int(balance))

    async def release_unanswered(
        self, ident: Identity, rid: str, *, reserved_at: float, now: float
    ) -> Settlement:
        """Release, unused, the reservation a reserve whose reply never came may have made
        after all; ``NOT_FOUND`` when it never ran or held nothing (``reserved_at``: the
        ``now`` that reserve was sent with, which names its day)."""
        hold = Hold(
            rid=rid,
            shard=ident.shard,
            pid=ident.pid,
            kid=ident.kid,
            day=utc_day(reserved_at),
            amount=0,
            out_tokens=0,
            balance=0,
            environment=ident.environment,
            cap_key=self.layout.cap(ident.shard, ident.cap_kid, day_tag(utc_day(reserved_at))),
        )
        return await self.settle(
            hold, now=now, credits_used=0, prompt_tokens=0, completion_tokens=0, outcome="released"
        )

    async def extend(self, hold: Hold, deadline: float) -> Written:
        """Move the reservation's deadline forward while its stream is alive (NOT_FOUND: it
        was settled or swept meanwhile)."""
        extended = await self._run(
            "extend",
            [self.layout.reservation(hold.shard, hold.rid), self.layout.reservations(hold.shard)],
            [hold.rid, int(deadline)],
        )
        return Written(ScriptStatus.OK if extended else ScriptStatus.NOT_FOUND)

    async def expired_holds(self, now: float, limit: int = 100) -> list[Hold]:
        """Open reservations past their deadline, at most ``limit`` per shard (sweeper).

        Two round trips whatever the number of shards: the ids of every shard, then the
        reservations they name."""
        shards = self.layout.all_shards()
        pipe = self.redis.pipeline(transaction=False)
        for shard in shards:
            pipe.zrangebyscore(
                self.layout.reservations(shard), "-inf", int(now), start=0, num=limit
            )
        found = [
            (shard, as_text(rid))
            for shard, rids in zip(shards, await pipe.execute(), strict=True)
            for rid in rids
        ]
        if not found:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for shard, rid in found:
            pipe.hmget(self.layout.reservation(shard, rid), SWEPT_FIELDS)
        holds: list[Hold] = []
        for (shard, rid), fields in zip(found, await pipe.execute(), strict=True):
            if fields[0] is None:
                continue  # settled meanwhile
            pid, kid, day, amount, environment = (as_text(f) for f in fields[:5])
            # a reservation names its cap counter (one without: its key's, that day)
            cap, idem = fields[5:]
            cap_key = as_text(cap) if cap else self.layout.cap(shard, kid, day_tag(day))
            holds.append(
                Hold(
                    rid=rid,
                    shard=shard,
                    pid=pid,
                    kid=kid,
                    day=day,
                    amount=int(amount),
                    out_tokens=0,
                    balance=0,
                    environment=environment,
                    cap_key=cap_key,
                    idempotency=None if idem is None else as_text(idem),
                )
            )
        return holds
