"""The credit ledger: every credit into or out of an account's pools outside a completion (a
purchase, a reward, an operator's grant, a refund, a dispute, an operator's debit) is a
durable entry first, and reaches Redis once.

1. ``record`` writes the entry, pending (``applied_at`` NULL), in one transaction with what
   must commit with it (an audit entry; a purchase's row: its caller's transaction).
2. It applies the entry to Redis under the entry's id: grant.lua adds what it asks (paying
   the account's debt first), take_back.lua takes it (the pools first, the rest owed as
   debt). Redis keeps a marker per id, so a second application changes nothing and answers
   what the first did.
3. ``mark_applied`` records how the pools and the debt moved, with the entry's webhook
   events, once.

A crash, a Redis failure or a lost answer between 1 and 3 leaves the entry pending: its
retry (the same id: an Idempotency-Key, a store's event id, a network's transaction id) or
the repair (``repair_pending``: the sweeper's rounds, ``svc admin reconcile --repair``)
applies it, exactly once. An entry Redis refuses for good (a reward past the day's limit,
its intent consumed, its account disabled) is taken back (deleted), unless a retry applied it
meanwhile; so is one whose account Redis lost (``take_back_when_missing``: the operator's
and the networks' entries, retried by their sources) unless the caller keeps it pending for
the repair to apply once the account is restored (a store's purchase, acknowledged to the
store).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

import msgspec

from app.accounts.lost_entries import LostEntries
from app.core.errors import ApiError, service_unavailable
from app.core.metrics import METRICS
from app.credits.money import Money
from app.credits.outcomes import Balance, ScriptStatus
from app.kv.client import REDIS_ERRORS
from app.store import AuditRecord, GrantRecord, Store, StoreError
from app.store.audit import new_seq
from app.webhooks.events import ledger_events

log = logging.getLogger("svc.ledger")

OPERATOR_SOURCE = "operator"
"""The source of an operator's entries (the admin API's and the CLI's grants and debits)."""
INTAKE_KINDS = ("purchase", "reward", "grant", "dispute_won")
"""Entries that add credits (grant.lua); the others take them back (take_back.lua). Which
script applies an entry follows from the sign of what it asks; the kinds name them."""
TAKE_BACK_KINDS = ("refund", "dispute", "debit")
REPAIR_AFTER_S = 30
"""How old a pending entry is before the repair applies it: longer than a request takes
from its insert to its mark (a few Redis and store round trips, bounded by their timeouts),
so the repair does not race a live request (harmless if it did: the marker)."""
REPAIR_BATCH = 200
REPAIR_EVERY_S = 10.0
"""How often each worker looks for pending entries: a pending entry older than
``REPAIR_AFTER_S`` is applied within this much more (once Redis has its account)."""
REPAIR_INTENT_TTL_S = 86_400
"""A repaired reward's intent marker lives this long: past any intent's own life."""
REFUSED = (ScriptStatus.DAILY_LIMIT, ScriptStatus.INTENT_USED, ScriptStatus.ACCOUNT_DISABLED)


class Applied(msgspec.Struct, frozen=True):
    """An entry after ``record`` or ``apply``: its status (OK: applied now, DUPLICATE:
    applied before, ACCOUNT_MISSING: pending, or a refusal of ``REFUSED``: taken back), the
    entry as stored, and the balance after (None when Redis did not answer)."""

    status: ScriptStatus
    entry: GrantRecord
    balance: Balance | None = None


class LedgerConfig(msgspec.Struct, frozen=True):
    """What a reward entry is applied with (the spotlight settings)."""

    reward_daily_limit: int = 0
    earned_ttl_s: int = 30 * 86_400


class Ledger:
    """Writes entries durably first, applies them to Redis once, repairs pending ones."""

    def __init__(
        self,
        store: Store,
        money: Money,
        config: LedgerConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.money = money
        self.config = config or LedgerConfig()
        self.clock = clock
        self.lost = LostEntries(store, money, clock, self.config.earned_ttl_s)

    async def record(
        self,
        entry: GrantRecord,
        *,
        audit: AuditRecord | None = None,
        intent_life_s: int = REPAIR_INTENT_TTL_S,
        take_back_when_missing: bool = True,
    ) -> Applied:
        """Write ``entry`` (pending) with ``audit``, then apply it. An entry of that id
        already written is not written again: applied, it answers DUPLICATE; pending, it
        is applied now (a retry). Raises 503 when Redis could not be reached (the entry
        stays pending: the repair applies it)."""
        if not entry.seq:
            entry = msgspec.structs.replace(entry, seq=new_seq())
        if not await self.store.insert_grant(entry, audit=audit):
            found = await self.store.get_grant(entry.grant_id)
            if found is None:  # taken back between the two reads: as new
                return await self.record(
                    entry,
                    audit=audit,
                    intent_life_s=intent_life_s,
                    take_back_when_missing=take_back_when_missing,
                )
            if found.applied_at is not None:
                return Applied(ScriptStatus.DUPLICATE, found)
            entry = found
        return await self.apply(
            entry, intent_life_s=intent_life_s, take_back_when_missing=take_back_when_missing
        )

    async def apply(
        self,
        entry: GrantRecord,
        *,
        intent_life_s: int = REPAIR_INTENT_TTL_S,
        take_back_when_missing: bool = True,
    ) -> Applied:
        """Apply a pending ``entry`` to Redis once and mark it applied."""
        asked = entry.credits - entry.debt_change
        try:
            if asked >= 0:
                status, balance, at, moved, debt_change = await self._grant(
                    entry, asked, intent_life_s
                )
            else:
                status, balance, at, moved, debt_change = await self._take(entry, -asked)
        except REDIS_ERRORS:
            log.warning("ledger entry %s pending: Redis did not answer", entry.grant_id)
            raise service_unavailable() from None
        if status in (ScriptStatus.OK, ScriptStatus.DUPLICATE):
            applied = msgspec.structs.replace(
                entry, credits=moved, debt_change=debt_change, applied_at=at
            )
            events = ledger_events(applied, balance.debt)
            if await self.store.mark_applied(
                entry.grant_id, credits=moved, debt_change=debt_change, applied_at=at, events=events
            ):
                return Applied(status, applied, balance)
            # marked by a twin first (a retry, the repair): the status is still this call's
            # script's, OK when it was the one that moved the credits
            stored = await self.store.get_grant(entry.grant_id)
            return Applied(status, stored or applied, balance)
        if status is ScriptStatus.ACCOUNT_MISSING:
            log.warning(
                "ledger entry %s pending: Redis has no balance of %s (run rebuild-redis)",
                entry.grant_id,
                entry.account_pid,
            )
            if take_back_when_missing:
                await self._take_back(entry)
            return Applied(status, entry, None)
        await self._take_back(entry)  # refused for good: a retry cannot change that
        return Applied(status, entry, balance)

    async def _grant(
        self, entry: GrantRecord, credits: int, intent_life_s: int
    ) -> tuple[ScriptStatus, Balance, int, int, int]:
        reward = entry.kind == "reward"
        granted = await self.money.grant(
            entry.account_pid,
            pool=entry.pool,
            credits=credits,
            grant_id=entry.grant_id,
            now=self.clock(),
            earned_ttl_s=self.config.earned_ttl_s if entry.pool == "earned" else 0,
            daily_limit=self.config.reward_daily_limit if reward else 0,
            intent=(entry.intent, intent_life_s) if entry.intent else None,
        )
        paid = granted.paid
        return granted.status, granted.balance, granted.granted_at, credits - paid, -paid

    async def _take(
        self, entry: GrantRecord, credits: int
    ) -> tuple[ScriptStatus, Balance, int, int, int]:
        taken = await self.money.take_back(
            entry.account_pid, credits=credits, entry_id=entry.grant_id, now=self.clock()
        )
        if taken.status is ScriptStatus.DUPLICATE and taken.taken + taken.owed != credits:
            # applied by a Redis whose marker does not tell the split (a rebuild's):
            # what it asked is known, how it fell between pools and debt is not
            return taken.status, taken.balance, taken.applied_at, -credits, 0
        return taken.status, taken.balance, taken.applied_at, -taken.taken, taken.owed

    async def _take_back(self, entry: GrantRecord) -> None:
        """Remove an entry Redis did not apply, unless a retry of it applied it meanwhile
        (one whose insert found this row, then ran its script): the row is deleted first and
        the marker read after, so a retry that applied it before the read is seen and its
        row put back, and one that applies it after inserts its own row first."""
        stored = await self.store.get_grant(entry.grant_id) or entry  # a retry's mark too
        await self.store.delete_grant(entry.grant_id)
        if await self.money.grant_applied(entry.account_pid, entry.grant_id):
            # put back as it was, and marked if it was pending: Redis answers DUPLICATE with
            # what it applied (the repair would, later)
            await self.store.insert_grant(stored)
            if stored.applied_at is None:
                await self.apply(stored)

    async def run(self, every_s: float = REPAIR_EVERY_S) -> None:
        """Repair every ``every_s`` (with jitter, so workers spread out) until cancelled:
        the pending entries, then the applied ones Redis lost (``LostEntries``). Every
        worker runs it; two repairing one entry at once apply it once (its marker)."""
        while True:
            await asyncio.sleep(every_s * random.uniform(0.5, 1.5))
            try:
                await self.repair_pending()
                await self.lost.recheck()
            except (StoreError, *REDIS_ERRORS, OSError) as exc:
                METRICS.labelled(METRICS.background_errors, "ledger_repair").inc()
                log.warning("ledger repair failed, retrying next round: %s", type(exc).__name__)

    async def repair_pending(self, *, older_than_s: float = REPAIR_AFTER_S) -> int:
        """Apply the pending entries older than ``older_than_s`` (those no request is still
        applying), oldest first: how many were applied now. An account Redis lacks keeps
        its entries pending (they are applied once it is restored)."""
        before = int(self.clock() - older_than_s)
        repaired = 0
        for entry in await self.store.list_pending(before, REPAIR_BATCH):
            try:
                done = await self.apply(entry, take_back_when_missing=False)
            except (StoreError, ApiError) as exc:  # the store, or Redis (a 503), is down
                log.warning("ledger repair stopped: %s", type(exc).__name__)
                break
            if done.status is ScriptStatus.OK:
                repaired += 1
                log.info("ledger entry %s applied by the repair", entry.grant_id)
        return repaired
