"""API keys' hot-path records in Redis: the digest → identity mapping, each key's record
(status, cap, name, expiry, models, rate limit), and what Redis knows of a key's use. The
key scripts write the records; the reads made outside the scripts keep the scripts' rules
(``lua/lib/keys.lua``) through ``key_expired`` and ``app.kv.fields`` (the models field, the
account's status)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from app.core.clock import day_tag, utc_day
from app.credits.ceilings import NO_CEILING
from app.credits.outcomes import Identity, KeyAccess, ScriptStatus, Written
from app.credits.script_args import ScriptArgs
from app.credits.scripts import Scripts
from app.kv.fields import (
    ACCOUNT_DISABLED,
    KEY_ACTIVE,
    NO_CAP,
    AccountField,
    KeyField,
    account_status,
    allowed_models,
    models_field,
)
from app.kv.layout import KeySpace, as_text
from app.store import KeyRecord

NEVER = 0  # a key's exp in Redis when it does not expire
NO_RATE_LIMIT = 0  # a key's rpm in Redis when it has no rate limit


def key_expired(expires_at: int, now: float) -> bool:
    """``lib/keys.lua``'s rule, for the reads made outside the scripts: a key with an expiry
    is expired from that second on."""
    return expires_at != NEVER and now >= expires_at


def _key_fields(record: KeyRecord) -> list[Any]:
    """The settings of a key as the key scripts take them (lib/keys.lua key_record)."""
    cap = NO_CAP if record.daily_cap_credits is None else record.daily_cap_credits
    expires = NEVER if record.expires_at is None else record.expires_at
    models = models_field(record.allowed_models)
    rpm = record.rate_limit_rpm or NO_RATE_LIMIT
    return [cap, record.name, expires, models, rpm, record.max_credits_per_request or NO_CEILING]


KEY_SETTINGS = "settings*6"
"""``_key_fields``'s six values, spread into the key scripts' ARGV (their ``ARGV[a..b]``)."""
PUT_KEY = ScriptArgs(
    "put_key",
    "acct",
    "status",
    "env",
    KEY_SETTINGS,
    replies={1: ScriptStatus.OK, 0: ScriptStatus.DUPLICATE},
)
UPDATE_KEY = ScriptArgs(
    "update_key",
    "acct",
    "status",
    "env",
    KEY_SETTINGS,
    replies={1: ScriptStatus.OK, -1: ScriptStatus.KEY_UNKNOWN},
)
REVOKE_KEY = ScriptArgs(
    "revoke_key",
    "acct",
    "env",
    KEY_SETTINGS,
    replies={1: ScriptStatus.OK, 0: ScriptStatus.DUPLICATE, -1: ScriptStatus.KEY_UNKNOWN},
)
RATE_START = ScriptArgs("rate_start", "now_ms")


class KeyUse(NamedTuple):
    """What Redis knows of a key's use (Redis only: a Redis that lost its data forgets it)."""

    last_used: int | None  # unix seconds of its last reservation; None: never
    today: int  # credits its lineage holds and has settled today (UTC): its daily cap's count


class KeyRecords:
    """The keys' records, over the scripts of one set of connections."""

    def __init__(self, scripts: Scripts, layout: KeySpace) -> None:
        self.redis = scripts.redis
        self.layout = layout
        self._run = scripts.run

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
        """Whether the key may be used at ``now`` (its account's status included), and the
        models it may use: the key's record and its account's status in one round trip
        (both in the account's slot)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(
            self.layout.api_key(ident.shard, ident.kid),
            [KeyField.ACCOUNT, KeyField.STATUS, KeyField.EXPIRES, KeyField.MODELS],
        )
        pipe.hget(self.layout.account(ident.shard, ident.pid), AccountField.STATUS)
        (acct, status, expires, models), account = await pipe.execute()
        listed = allowed_models(models)
        allowed = None if listed is None else frozenset(listed)
        if acct is None or as_text(acct) != ident.pid:
            return KeyAccess(ScriptStatus.KEY_UNKNOWN, allowed)
        if status != KEY_ACTIVE:
            return KeyAccess(ScriptStatus.KEY_REVOKED, allowed)
        if key_expired(int(expires or 0), now):
            return KeyAccess(ScriptStatus.KEY_EXPIRED, allowed)
        if account_status(account) == ACCOUNT_DISABLED:
            return KeyAccess(ScriptStatus.ACCOUNT_DISABLED, allowed)
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

    async def start_request(self, ident: Identity, now: float) -> int:
        """Count a request that holds no credits (a token count) against its key lineage's
        rate limit, in the log the completions' reserve keeps: 0 when it may start (and is
        counted), else the milliseconds until it may (nothing counted)."""
        status, wait_ms = await self._run(
            "rate_start",
            [
                self.layout.api_key(ident.shard, ident.kid),
                self.layout.rate(ident.shard, ident.cap_kid),
            ],
            RATE_START(now_ms=round(now * 1000)),
        )
        return 0 if status == ScriptStatus.OK else int(wait_ms)

    async def put_key(self, ident: Identity, record: KeyRecord) -> Written:
        """Write a key's hot-path record (status, cap, name, expiry of ``record``) unless one
        exists (DUPLICATE: left unchanged, so a late re-warm can never undo a revocation)."""
        written = await self._run(
            "put_key",
            [self.layout.api_key(ident.shard, ident.kid)],
            PUT_KEY(
                acct=ident.pid,
                status=record.status,
                env=ident.environment,
                settings=_key_fields(record),
            ),
        )
        return Written(PUT_KEY.replies[int(written)])

    async def update_key(self, ident: Identity, record: KeyRecord) -> Written:
        """Set a key's name, daily cap and expiry to ``record``'s (its status stays as Redis
        has it; ``record.status`` is written only when Redis lost the record): OK, or
        KEY_UNKNOWN when the record names another account (nothing changed)."""
        result = int(
            await self._run(
                "update_key",
                [self.layout.api_key(ident.shard, ident.kid)],
                UPDATE_KEY(
                    acct=ident.pid,
                    status=record.status,
                    env=ident.environment,
                    settings=_key_fields(record),
                ),
            )
        )
        return Written(UPDATE_KEY.replies.get(result, ScriptStatus.KEY_UNKNOWN))

    async def revoke_key(self, ident: Identity, record: KeyRecord) -> Written:
        """Mark a key revoked: OK now, DUPLICATE when it was already, KEY_UNKNOWN when the
        record names another account (nothing changed)."""
        result = int(
            await self._run(
                "revoke_key",
                [self.layout.api_key(ident.shard, ident.kid)],
                REVOKE_KEY(acct=ident.pid, env=ident.environment, settings=_key_fields(record)),
            )
        )
        return Written(REVOKE_KEY.replies.get(result, ScriptStatus.KEY_UNKNOWN))
