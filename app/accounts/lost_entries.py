"""Ledger entries a Redis failover lost, found and applied again.

Redis replicates asynchronously: a primary that fails can take with it the last writes it
acknowledged, among them ledger entries the store already records as applied (a purchase
acknowledged to its store, a reward, an operator's grant). Each applied entry leaves a
marker in Redis, written by the same script call as the credits it moved, and a script's
writes reach a replica together or not at all: an applied entry whose marker is missing
was lost with its credits, and applying it again under its id applies it once.

Every worker's ledger loop (``Ledger.run``) rechecks the entries applied since its last
successful round (less ``MARGIN_S``, for the clocks' differences) every
``app.accounts.ledger.REPAIR_EVERY_S``; while Redis does not answer the rounds fail and the
window grows, so what a failover lost is applied within a round of Redis answering again.
A worker starts with the last ``FIRST_WINDOW_S``. ``svc admin reconcile --repair`` rechecks
every applied entry, and so does a round that finds Redis went further back than its window
(restarted from an older AOF or backup): each round first looks for the marker of the newest
entry an earlier round found, and when it is gone, every applied entry is rechecked. An
entry applied again is applied as it was first: a reward past a day's limit or with a
consumed intent is not refused again (it was earned), and an entry whose account Redis
lost is left for ``rebuild-redis``, which restores both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from app.credits.money import Money
from app.credits.outcomes import ScriptStatus
from app.store import GrantRecord, Store

log = logging.getLogger("svc.ledger")

FIRST_WINDOW_S = 900
"""What a worker rechecks when it starts: a failover just before it (or a restart of
every worker with Redis) is covered."""
MARGIN_S = 30
"""Rechecked again after each round: entries applied with a time a little behind this
worker's clock (another worker's, Redis's) are not skipped."""
PAGE = 500


class LostEntries:
    """Finds the applied entries Redis no longer has, and applies them again."""

    def __init__(
        self,
        store: Store,
        money: Money,
        clock: Callable[[], float],
        earned_ttl_s: int,
    ) -> None:
        self.store = store
        self.money = money
        self.clock = clock
        self.earned_ttl_s = earned_ttl_s
        self.checked_until = int(clock()) - FIRST_WINDOW_S
        self.newest_found: tuple[str, str] | None = None
        """(account, entry id) of the newest entry a round found in Redis: when its marker
        is gone, Redis lost writes older than any window (it went back in time)."""

    async def recheck(self) -> int:
        """Recheck the entries applied since the last round (less the margin), or all of
        them when Redis went back past it: how many Redis had lost and now has again.
        Raises what the store or Redis raised (the window stays, the next round covers
        it)."""
        started = int(self.clock())
        since = self.checked_until - MARGIN_S
        if self.newest_found is not None:
            (still_there,) = await self.money.grants_applied([self.newest_found])
            if not still_there:
                log.warning(
                    "Redis lost ledger entries older than the last recheck (restarted from "
                    "an older copy?): every applied entry is checked again"
                )
                since, self.newest_found = 0, None
        restored = await self.recheck_since(since)
        self.checked_until = started
        return restored

    async def recheck_since(self, since: int) -> int:
        """Recheck every entry applied at or after ``since``."""
        restored = 0
        after = (since, "")
        while True:
            page = await self.store.list_applied_after(after[0], after[1], PAGE)
            if not page:
                return restored
            present = await self.money.grants_applied([(e.account_pid, e.grant_id) for e in page])
            for entry, found in zip(page, present, strict=True):
                if found:
                    self.newest_found = (entry.account_pid, entry.grant_id)
                else:
                    restored += await self._apply_again(entry)
            last = page[-1]
            after = (last.applied_at or 0, last.grant_id)
            if len(page) < PAGE:
                return restored

    async def _apply_again(self, entry: GrantRecord) -> int:
        asked = entry.credits - entry.debt_change
        now = self.clock()
        if asked >= 0:
            ttl = self.earned_ttl_s if entry.pool == "earned" else 0
            status = (
                await self.money.grant(
                    entry.account_pid,
                    pool=entry.pool,
                    credits=asked,
                    grant_id=entry.grant_id,
                    now=now,
                    earned_ttl_s=ttl,
                )
            ).status
        else:
            status = (
                await self.money.take_back(
                    entry.account_pid, credits=-asked, entry_id=entry.grant_id, now=now
                )
            ).status
        if status is ScriptStatus.OK:
            log.warning("ledger entry %s was lost by Redis and is applied again", entry.grant_id)
            return 1
        if status is ScriptStatus.ACCOUNT_MISSING:
            log.warning(
                "ledger entry %s was lost with its account %s: run rebuild-redis",
                entry.grant_id,
                entry.account_pid,
            )
        return 0
