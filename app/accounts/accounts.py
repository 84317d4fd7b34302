"""Accounts: their creation, their purchased credits and their balance; with their keys'
operations (``ApiKeys``), the one object the admin API, the CLI and ``/v1`` call.

Creating an account or a grant writes the durable store first (the record of truth), then
Redis. Redis's writes are idempotent, so a retried call converges.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from app.accounts.answers import CreditBalance, credit_balance
from app.accounts.api_keys import ApiKeys
from app.core.errors import account_not_found, service_unavailable
from app.core.ids import random_id
from app.credits.key_records import KeyRecords
from app.credits.money import Money
from app.credits.outcomes import Balance, ScriptStatus
from app.store import AccountRecord, GrantRecord, Store
from app.webhooks.registry import Webhooks


class Accounts(ApiKeys):
    """Operations on accounts, their credits and their keys."""

    def __init__(
        self,
        store: Store,
        money: Money,
        key_records: KeyRecords,
        pepper: bytes,
        *,
        max_active_keys: int = 100,
        default_rate_limit_rpm: int | None = None,
        model_ids: tuple[str, ...] = (),
        webhooks: Webhooks | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``default_rate_limit_rpm``: a new key's when its creator sets none;
        ``model_ids``: the aliases a key's ``allowed_models`` may name; ``webhooks``:
        where key events go (revoked, rotated)."""
        self.store = store
        self.money = money
        self.key_records = key_records
        self.pepper = pepper
        self.max_active_keys = max_active_keys
        self.default_rate_limit_rpm = default_rate_limit_rpm
        self.model_ids = model_ids
        self.webhooks = webhooks
        self.clock = clock

    async def create_account(self) -> str:
        """A new account with empty pools; returns its public id."""
        pid = random_id("acct_", 16)
        await self.store.create_account(AccountRecord(pid=pid, created_at=int(self.clock())))
        await self.money.open_account(pid)
        return pid

    async def require_account(self, pid: str) -> AccountRecord:
        record = await self.store.get_account(pid)
        if record is None:
            raise account_not_found(pid)
        return record

    async def grant_purchased(
        self, pid: str, credits: int, *, grant_id: str | None = None, source: str = "admin"
    ) -> CreditBalance:
        """Add purchased credits (they never expire); written to the ledger table first."""
        await self.require_account(pid)
        now = self.clock()
        grant = GrantRecord(
            grant_id=grant_id or random_id("grant_", 20),
            account_pid=pid,
            pool="purchased",
            credits=credits,
            source=source,
            reference=None,
            created_at=int(now),
        )
        await self.store.insert_grant(grant)
        await self.money.open_account(pid)
        status, balance, _granted_at = await self.money.grant(
            pid, pool="purchased", credits=credits, grant_id=grant.grant_id, now=now
        )
        if status not in (ScriptStatus.OK, ScriptStatus.DUPLICATE):
            raise service_unavailable()
        return credit_balance(balance)

    async def balance(self, pid: str) -> CreditBalance:
        """An account's pools, read straight from Redis."""
        await self.require_account(pid)
        balance = await self.money.account_balance(pid, self.clock())
        return credit_balance(balance or Balance(0, 0, 0))
