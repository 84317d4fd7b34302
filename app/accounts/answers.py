"""What the account and key operations answer: a balance, a key as created (its secret
shown this once), a key in a list (never the secret, never a hash), a revocation, an
account in a list; and the one mapping of each from the records they show.
"""

from __future__ import annotations

from typing import Any

import msgspec

from app.core.clock import iso_utc
from app.credits.key_records import KeyUse
from app.credits.outcomes import Balance
from app.keys.format import public_id
from app.store import AccountRecord, KeyRecord


class CreditBalance(msgspec.Struct):
    """Spec 2.5."""

    earned_available: int
    earned_expires_at: str | None
    purchased_available: int
    total_available: int
    debt: int  # credits owed (a refund or a debit found the pools short); 0: none


class _KeyAnswer(msgspec.Struct):
    """What every answer about a key starts with, in this order."""

    id: str
    object: str
    name: str
    environment: str
    daily_cap_credits: int | None
    created_at: int


class ApiKeyCreated(_KeyAnswer):
    """The create (and rotate) response: the only place the secret ever appears."""

    key: str
    expires_at: str | None = None  # ISO 8601 UTC; None: never
    allowed_models: list[str] | None = None  # None: every model
    rate_limit_rpm: int | None = None  # None: no limit
    max_credits_per_request: int | None = None  # None: no ceiling
    replaces: str | None = None  # the id of the key it was rotated from
    role: str = "admin"  # admin | inference (app.keys.roles)


class ApiKeyItem(_KeyAnswer):
    """A key in a list: never the secret, never a hash."""

    last4: str
    status: str
    expires_at: str | None = None  # ISO 8601 UTC; None: never
    last_used_at: str | None = None  # ISO 8601 UTC of its last request; None: never
    allowed_models: list[str] | None = None  # None: every model
    rate_limit_rpm: int | None = None  # None: no limit
    max_credits_per_request: int | None = None  # None: no ceiling
    replaces: str | None = None  # the id of the key it was rotated from
    used_today_credits: int = 0  # held and spent today (UTC), as its daily cap counts them
    role: str = "admin"  # admin | inference (app.keys.roles)


class ApiKeyDeleted(msgspec.Struct):
    id: str
    object: str
    deleted: bool


class ApiKeyList(msgspec.Struct):
    object: str
    data: list[ApiKeyItem]


def credit_balance(balance: Balance) -> CreditBalance:
    expires = iso_utc(balance.earned_exp) if balance.earned > 0 and balance.earned_exp else None
    return CreditBalance(
        earned_available=balance.earned,
        earned_expires_at=expires,
        purchased_available=balance.purchased,
        total_available=balance.total,
        debt=balance.debt,
    )


def _iso_or_none(ts: int | None) -> str | None:
    return None if ts is None else iso_utc(ts)


def _model_list(models: str | None) -> list[str] | None:
    return None if models is None else models.split()


def _public_or_none(kid: str | None) -> str | None:
    return None if kid is None else public_id(kid)


def _shown(rec: KeyRecord) -> dict[str, Any]:
    """What every answer about a key shows of it."""
    return {
        "id": public_id(rec.kid),
        "object": "api_key",
        "name": rec.name,
        "environment": rec.environment,
        "daily_cap_credits": rec.daily_cap_credits,
        "created_at": rec.created_at,
        "expires_at": _iso_or_none(rec.expires_at),
        "allowed_models": _model_list(rec.allowed_models),
        "rate_limit_rpm": rec.rate_limit_rpm,
        "max_credits_per_request": rec.max_credits_per_request,
        "replaces": _public_or_none(rec.replaces),
        "role": rec.role,
    }


def key_item(rec: KeyRecord, use: KeyUse) -> ApiKeyItem:
    return ApiKeyItem(
        **_shown(rec),
        last4=rec.last4,
        status=rec.status,
        last_used_at=_iso_or_none(use.last_used),
        used_today_credits=use.today,
    )


def key_created(rec: KeyRecord, secret: str) -> ApiKeyCreated:
    """The answer to a creation or rotation: ``rec`` and its secret, shown this once."""
    return ApiKeyCreated(**_shown(rec), key=secret)


def key_deleted(rec: KeyRecord) -> ApiKeyDeleted:
    """The answer to a revocation of ``rec``."""
    return ApiKeyDeleted(id=public_id(rec.kid), object="api_key", deleted=True)


class AccountItem(msgspec.Struct):
    """An account as a list of them shows it."""

    id: str  # acct_…
    object: str
    created_at: int  # unix seconds
    status: str  # active | disabled (its keys are refused)
    external_id: str | None  # the app's own id of it (app.accounts.external); None: none


class AccountList(msgspec.Struct):
    """A page of accounts, newest first (``after``: the previous page's ``last_id``)."""

    object: str
    data: list[AccountItem]
    first_id: str | None
    last_id: str | None
    has_more: bool


def account_item(rec: AccountRecord) -> AccountItem:
    return AccountItem(
        id=rec.pid,
        object="account",
        created_at=rec.created_at,
        status=rec.status,
        external_id=rec.external_id,
    )


def account_list(records: list[AccountRecord], limit: int) -> AccountList:
    """The page of ``records`` (read one more than ``limit``: ``has_more`` when it came)."""
    data = [account_item(r) for r in records[:limit]]
    return AccountList(
        object="list",
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=len(records) > limit,
    )
