"""One account as an operator looks it up (``GET /admin/v1/accounts/{pid}``, ``svc admin
account``): its status, its balance as ``/v1/credits`` shows it, its keys as a key list
shows them (never a secret) and what it spent today.

Unlike ``inspect`` (Redis as it is, for debugging) this is what the API's own answers say,
put together: the durable record's status, the pools, the keys with their use today.
"""

from __future__ import annotations

import msgspec

from app.accounts.accounts import Accounts
from app.accounts.answers import ApiKeyItem, CreditBalance
from app.accounts.api_keys import ApiKeys
from app.usage.reader import DailyUsage, UsageReader


class AccountDetail(msgspec.Struct):
    """An account, whole: what a list shows of it, then its credits, keys and day."""

    id: str  # acct_…
    object: str
    created_at: int  # unix seconds
    status: str  # active | disabled (its keys are refused: 403 account_disabled)
    external_id: str | None  # the app's own id of it; None: none
    credits: CreditBalance  # as GET /v1/credits
    keys: list[ApiKeyItem]  # as GET /v1/api-keys: newest first, revoked ones included
    usage_today: DailyUsage  # the live keys' usage this UTC day, as a GET /v1/usage day


async def account_detail(
    accounts: Accounts, api_keys: ApiKeys, usage: UsageReader, pid: str, now: float
) -> AccountDetail:
    """``pid`` as ``AccountDetail`` shows it at ``now``; 404 for an unknown account."""
    record = await accounts.require_account(pid)
    credits = await accounts.balance(pid)
    keys = await api_keys.list_keys(pid)
    today = await usage.summary(pid, "live", now, 1)
    return AccountDetail(
        id=record.pid,
        object="account",
        created_at=record.created_at,
        status=record.status,
        external_id=record.external_id,
        credits=credits,
        keys=keys.data,
        usage_today=today.daily[0],
    )
