"""Accounts: their creation, their purchased credits and their balance, finding them and
disabling them (their keys are ``app.accounts.api_keys.ApiKeys``'s).

Creating an account or a grant, or changing its status, writes the durable store first (the
record of truth), then Redis. Redis's writes are idempotent, so a retried call converges.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from msgspec import UnsetType

from app.accounts import audit
from app.accounts.answers import AccountList, CreditBalance, account_list, credit_balance
from app.accounts.bodies import AccountUpdateRequest
from app.accounts.external import ACCOUNT_ID_PREFIX, is_account_id
from app.accounts.ledger import OPERATOR_SOURCE, Ledger
from app.accounts.lookup import AccountFilter
from app.core.errors import (
    StoreConflict,
    account_not_found,
    external_id_taken,
    invalid_value,
    service_unavailable,
)
from app.core.ids import random_id
from app.credits import idempotency
from app.credits.money import Money
from app.credits.outcomes import Balance, Identity, ScriptStatus
from app.keys.refusals import key_refusal
from app.store import AccountQuery, AccountRecord, GrantRecord, Store

log = logging.getLogger("svc.accounts")
_STATUS_SYNC_ROUNDS = 5  # writes of a status to Redis, racing other changes, before a 503


class Accounts:
    """Operations on accounts and their credits."""

    def __init__(
        self,
        store: Store,
        money: Money,
        *,
        ledger: Ledger | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.money = money
        self.ledger = ledger or Ledger(store, money, clock=clock)
        self.clock = clock

    async def create_account(self, external_id: str | None = None) -> str:
        """A new account with empty pools, and the app's ``external_id`` of it (checked by
        the caller: ``app.accounts.external``); returns its public id. 409 when another
        account has that external id (nothing written, no audit entry). When Redis fails (a
        stall: the 503 asks for a retry) the store's row goes too, so the retry makes the
        only account."""
        pid = random_id(ACCOUNT_ID_PREFIX, 16)
        now = self.clock()
        details = {} if external_id is None else {"external_id": external_id}
        entry = audit.audit_entry(audit.ACCOUNT_CREATE, pid, pid, details, now)
        record = AccountRecord(pid=pid, created_at=int(now), external_id=external_id)
        if not await self.store.create_account(record, entry):
            raise external_id_taken()
        try:
            await self.money.open_account(pid)
        except Exception:
            await self.store.delete_new_account(pid)
            raise
        return pid

    async def require_account(self, pid: str) -> AccountRecord:
        record = await self.store.get_account(pid)
        if record is None:
            raise account_not_found(pid)
        return record

    async def set_external_id(self, pid: str, external_id: str | None) -> AccountRecord:
        """Set, change or clear (None) the account's external id; 409 when another account
        has it, 404 for an unknown account (nothing written, no audit entry, either way).
        Only the store keeps it: Redis and the keys do not need it."""
        details = {"external_id": external_id}  # the changed field (None: cleared)
        entry = audit.audit_entry(audit.ACCOUNT_UPDATE, pid, pid, details, self.clock())
        try:
            updated = await self.store.set_external_id(pid, external_id, entry)
        except StoreConflict:
            # the accounts' one unique column besides the pid, which an update never sets
            raise external_id_taken() from None
        if updated is None:
            raise account_not_found(pid)
        return updated

    async def account_reference(self, reference: str) -> str:
        """The pid of the account ``reference`` names: its id (``acct_…``) or its external
        id (which never starts so); 404 when none is. For callers that let the app name an
        account by its own id (purchases)."""
        if is_account_id(reference):
            return (await self.require_account(reference)).pid
        record = await self.store.find_external_id(reference)
        if record is None:
            raise account_not_found(reference)
        return record.pid

    async def grant_purchased(
        self,
        pid: str,
        credits: int,
        *,
        grant_id: str | None = None,
        idempotency_key: str | None = None,
        source: str = OPERATOR_SOURCE,
        reason: str | None = None,
    ) -> CreditBalance:
        """Add purchased credits (they never expire; they pay the account's debt first): an
        operator's grant, a ledger entry (``app.accounts.ledger``) written before Redis
        changes. ``grant_id``: the entry's id; else one derived from the request's
        ``idempotency_key`` (``idempotency.grant_id``: the grant is applied once per key,
        whatever the key's record says); else a random one. An account Redis lost (its data
        lost, before ``rebuild-redis``) is never opened empty here (the rebuild would keep
        that hash, and the account's credits with it): the entry is taken back and the
        answer is a 503, which the operator retries once the account is restored."""
        details = {"credits": credits, "pool": "purchased", "reason": reason}
        entry_id = grant_id or idempotency.grant_id(pid, idempotency_key)
        return await self._operator_entry(
            pid, credits, "grant", audit.CREDITS_GRANT, details, entry_id, source, reason
        )

    async def debit(
        self,
        pid: str,
        credits: int,
        *,
        entry_id: str | None = None,
        idempotency_key: str | None = None,
        reason: str | None = None,
    ) -> CreditBalance:
        """Take ``credits`` back as a refund does: out of the purchased pool, then the earned
        one, the rest owed as the account's debt (its live keys are refused, 402, until a
        grant pays it). Its id as ``grant_purchased``'s."""
        details = {"credits": credits, "reason": reason}
        entry_id = entry_id or idempotency.grant_id(pid, idempotency_key, kind="debit")
        return await self._operator_entry(
            pid, -credits, "debit", audit.CREDITS_DEBIT, details, entry_id, OPERATOR_SOURCE, reason
        )

    async def _operator_entry(
        self,
        pid: str,
        credits: int,
        kind: str,
        action: str,
        details: Mapping[str, object],
        entry_id: str | None,
        source: str,
        reason: str | None,
    ) -> CreditBalance:
        await self.require_account(pid)
        now = self.clock()
        entry = GrantRecord(
            grant_id=entry_id or random_id("grant_", 20),
            account_pid=pid,
            pool="purchased",
            credits=credits,
            source=source,
            reference=None,
            created_at=int(now),
            reason=reason,
            kind=kind,
        )
        entry_audit = audit.audit_entry(action, pid, entry.grant_id, details, now)
        # a retry of an entry (its id stored already) writes nothing, its audit entry included
        done = await self.ledger.record(entry, audit=entry_audit)
        if done.status not in (ScriptStatus.OK, ScriptStatus.DUPLICATE):
            raise service_unavailable()
        balance = done.balance or await self.money.account_balance(pid, self.clock())
        return credit_balance(balance or Balance(0, 0, 0))

    async def key_balance(self, ident: Identity) -> CreditBalance:
        """The pools of ``ident``'s account, read through its key (a use for
        ``Authenticator.authenticated``): one script call checks the key too, and a key
        that may not be used is refused as on every route."""
        status, balance = await self.money.balance(ident, self.clock())
        refusal = key_refusal(status)
        if refusal is not None:
            raise refusal
        return credit_balance(balance)

    async def balance(self, pid: str) -> CreditBalance:
        """An account's pools, read straight from Redis."""
        await self.require_account(pid)
        balance = await self.money.account_balance(pid, self.clock())
        return credit_balance(balance or Balance(0, 0, 0))

    async def find_accounts(self, wanted: AccountFilter) -> AccountList:
        """A page of the accounts ``wanted`` names (all when it names none), newest first;
        ``has_more`` when more follow. 400 naming ``after`` when it names no account."""
        after = None
        if wanted.after is not None:
            record = await self.store.get_account(wanted.after)
            if record is None:
                raise invalid_value("after", "'after' must be the id of an account of this list.")
            after = (record.created_at, record.pid)
        query = AccountQuery(
            limit=wanted.limit + 1,
            pid=wanted.pid,
            kid=wanted.kid,
            last4=wanted.last4,
            external_id=wanted.external_id,
            after=after,
        )
        return account_list(await self.store.list_accounts_page(query), wanted.limit)

    async def update(self, pid: str, req: AccountUpdateRequest) -> None:
        """What an operator's ``PATCH`` of the account sets (fields left out keep theirs):
        the external id first, so that its 409 changes nothing, then the status."""
        if not isinstance(req.external_id, UnsetType):
            await self.set_external_id(pid, req.external_id)
        if not isinstance(req.status, UnsetType):
            await self.set_status(pid, req.status)

    async def set_status(self, pid: str, status: str) -> AccountRecord:
        """Disable an account (every key of it refused, 403 ``account_disabled``, from the
        next request on, on every worker: the scripts read the status in the account hash
        they read anyway) or enable it again. The durable record is written first, then
        Redis, until Redis holds what the store says (two operators racing may write Redis
        in the other order than the store). A Redis that lost the account's hash is left
        so (nothing is served without it); ``rebuild-redis`` restores the status with the
        pools."""
        action = audit.ACCOUNT_STATUS[status]
        entry = audit.audit_entry(action, pid, pid, {"status": status}, self.clock())
        updated = await self.store.set_account_status(pid, status, entry)
        if updated is None:
            raise account_not_found(pid)
        for _ in range(_STATUS_SYNC_ROUNDS):
            await self.money.set_account_status(pid, updated.status)
            now = await self.store.get_account(pid)
            if now is None:
                raise service_unavailable()  # accounts are never deleted
            if now.status == updated.status:
                return now
            updated = now
        raise service_unavailable()
