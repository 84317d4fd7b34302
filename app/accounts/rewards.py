"""Spotlight rewards: earned credits for verified views in the companion app.

A reward is a ledger entry (``app.accounts.ledger``): durable first, then applied in Redis,
where one script checks the day's limit, grants the credits, rolls the earned pool's expiry
and marks the view as rewarded, atomically. Its id is the view's (network, account, view),
so a network's retry is rewarded once; a reward Redis refuses (the day's limit, an intent
consumed, a disabled account) takes its entry back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated

import msgspec

from app.accounts import audit
from app.accounts.ledger import OPERATOR_SOURCE, REPAIR_INTENT_TTL_S, Ledger, LedgerConfig
from app.core.clock import DAY_S, iso_utc, seconds_to_utc_midnight
from app.core.errors import (
    ApiError,
    ErrorKind,
    account_not_found,
    invalid_value,
    service_unavailable,
)
from app.core.validation import convert_fields, query_int
from app.credits.money import Money
from app.credits.outcomes import ScriptStatus
from app.store import AccountRecord, GrantRecord, Store

MAX_VIEW_ID = 200
REWARDS_LIMIT = 20  # rewards listed unless told: four days' worth at the default limit
MAX_REWARDS_LIMIT = 100


def rewards_limit(raw: str | None) -> int:
    """How many rewards ``GET /v1/spotlights/rewards`` lists: its ``limit`` parameter from
    1 to ``MAX_REWARDS_LIMIT`` (``REWARDS_LIMIT`` when absent); a 400 naming it otherwise."""
    return query_int(raw, "limit", low=1, high=MAX_REWARDS_LIMIT, default=REWARDS_LIMIT)


class SpotlightRequest(msgspec.Struct):
    """Body of ``POST /admin/v1/accounts/{pid}/spotlights``."""

    view_id: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_VIEW_ID)]


class SpotlightReward(msgspec.Struct):
    """A reward as granted; a repeated view id answers the very same object."""

    object: str
    account_pid: str
    view_id: str
    credits: int
    granted_at: str  # when the reward was applied, UTC
    earned_expires_at: str  # the expiry this reward gave the earned pool


class RewardItem(msgspec.Struct):
    """One spotlight reward as the account's list shows it."""

    id: str  # the grant's id: <network>:<pid>:<the network's transaction id>
    object: str
    network: str  # admob | applovin | levelplay | signed (a verifier's) | operator (admin API)
    view_id: str  # the view as its network named it
    credits: int
    granted_at: str
    earned_expires_at: str  # the expiry this reward gave the earned pool


class RewardList(msgspec.Struct):
    """``GET /v1/spotlights/rewards``: the latest rewards, newest first, and the day's
    count against its limit."""

    object: str
    data: list[RewardItem]
    rewards_today: int  # rewards granted since 00:00 UTC
    daily_limit: int
    credits_per_reward: int


OPERATOR_GRANT = "spotlight"  # the grant id prefix of a reward the admin API granted


def validate_view_id(view_id: str) -> str:
    """A view id as ``SpotlightRequest`` limits it (from the CLI too), and printable text
    (what decoding cannot check)."""
    convert_fields({"view_id": view_id}, SpotlightRequest)
    if not view_id.isprintable():
        raise invalid_value(
            "view_id", f"'view_id' must be 1 to {MAX_VIEW_ID} printable characters."
        )
    return view_id


class Spotlights:
    """Grants spotlight rewards: ``credits`` each, at most ``daily_limit`` per account per
    UTC day, idempotent by view id, each rolling the earned pool's expiry."""

    def __init__(
        self,
        store: Store,
        money: Money,
        *,
        credits: int = 5_000,
        daily_limit: int = 5,
        expiry_days: int = 30,
        ledger: Ledger | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.money = money
        self.credits = credits
        self.daily_limit = daily_limit
        self.ttl_s = expiry_days * DAY_S
        config = LedgerConfig(reward_daily_limit=daily_limit, earned_ttl_s=self.ttl_s)
        self.ledger = ledger or Ledger(store, money, config, clock)
        self.clock = clock

    async def reward(self, pid: str, view_id: str) -> SpotlightReward:
        """Grant the reward for ``view_id`` once; 404 for an unknown account, 429 past the
        day's limit."""
        validate_view_id(view_id)
        account = await self.store.get_account(pid)
        if account is None:
            raise account_not_found(pid)
        now = self.clock()
        grant_id = f"{OPERATOR_GRANT}:{pid}:{view_id}"
        status, record = await self.grant_view(account, grant_id, view_id, now)
        if status is ScriptStatus.DAILY_LIMIT:
            raise ApiError(
                ErrorKind.SPOTLIGHT_LIMIT,
                f"This account has received {self.daily_limit} spotlight rewards today, "
                "the most allowed per UTC day.",
                headers={"retry-after": str(seconds_to_utc_midnight(now))},
            )
        if record is None:
            raise service_unavailable()
        return SpotlightReward(
            object="spotlight_reward",
            account_pid=pid,
            view_id=view_id,
            credits=record.credits,
            granted_at=iso_utc(record.created_at),
            earned_expires_at=iso_utc(self.expires_at(record)),
        )

    async def grant_view(
        self,
        account: AccountRecord,
        grant_id: str,
        reference: str,
        now: float,
        *,
        intent: tuple[str, int] | None = None,
    ) -> tuple[ScriptStatus, GrantRecord | None]:
        """Grant one view's reward once per ``grant_id``, consuming ``intent`` (a spotlight
        intent's id and the seconds it has left) in the same script call: a ledger entry
        (``app.accounts.ledger``), durable before Redis changes. The script's status, and
        the entry when it was applied (now, or before: ``DUPLICATE``), None otherwise (a
        refusal takes the entry back)."""
        pid = account.pid
        network = grant_id.partition(":")[0]
        entry = GrantRecord(
            grant_id=grant_id,
            account_pid=pid,
            pool="earned",
            credits=self.credits,
            source=OPERATOR_SOURCE if network == OPERATOR_GRANT else network,
            reference=reference,
            created_at=int(now),
            expires_at=int(now) + self.ttl_s,
            kind="reward",
            intent=None if intent is None else intent[0],
        )
        # an operator's reward (``reward``) is audited; a network's callback is not
        earned = {"credits": entry.credits, "pool": entry.pool, "view_id": reference}
        entry_audit = audit.audit_entry(audit.SPOTLIGHT_GRANT, pid, grant_id, earned, now)
        # An account Redis lost is never opened empty here: rebuild-redis would keep that
        # hash, and lose the account's credits. ACCOUNT_MISSING takes the entry back: the
        # caller answers 503 and the network's retry is rewarded once the account is restored.
        life = REPAIR_INTENT_TTL_S if intent is None else max(1, intent[1])
        done = await self.ledger.record(entry, audit=entry_audit, intent_life_s=life)
        if done.status not in (ScriptStatus.OK, ScriptStatus.DUPLICATE):
            return done.status, None
        return done.status, done.entry

    async def history(self, pid: str, limit: int, now: float) -> RewardList:
        """The account's ``limit`` latest rewards, newest first, with the UTC day's count."""
        today = int(now) - int(now) % DAY_S
        records, today_count = await self.store.list_rewards(pid, limit, today)
        return RewardList(
            object="list",
            data=[self._item(record) for record in records],
            rewards_today=today_count,
            daily_limit=self.daily_limit,
            credits_per_reward=self.credits,
        )

    def _item(self, record: GrantRecord) -> RewardItem:
        network = record.grant_id.partition(":")[0]
        return RewardItem(
            id=record.grant_id,
            object="spotlight.reward",
            network="operator" if network == OPERATOR_GRANT else network,
            view_id=record.reference or "",
            credits=record.credits,
            granted_at=iso_utc(record.created_at),
            earned_expires_at=iso_utc(self.expires_at(record)),
        )

    def expires_at(self, record: GrantRecord) -> int:
        """The expiry a reward gave the earned pool."""
        return record.expires_at or record.created_at + self.ttl_s
