"""Purchases on the credit ledger, whatever the store: a confirmed purchase grants its
credits once, refunds take back their share, a dispute holds back the rest until it is
won. What a store's event asks (``PaymentEvent``) becomes ledger entries with ids made of
what the event names (the purchase, the cumulative share refunded, the dispute), so a
repeated, late or concurrent event asks for an entry that exists and changes nothing.

An event about a payment whose purchase is not stored yet is kept and applied when the
purchase arrives. Both sides commit their own write before they read the other's (the
purchase, then the kept events; the kept event, then the purchase), so whichever commits
second sees the first: no event is kept forever beside its purchase.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal

import msgspec

from app.accounts.accounts import Accounts
from app.accounts.ledger import Applied, Ledger
from app.core.errors import ApiError, ErrorKind, service_unavailable
from app.core.ids import random_id
from app.credits.outcomes import ScriptStatus
from app.purchases.events import PaymentEvent
from app.purchases.refunds import amount_refunded, credits_to_take
from app.store import GrantRecord, KeptEvent, PurchaseChange, PurchaseRecord, RevenueEntry, Store
from app.store.audit import new_seq
from app.store.books import REVENUE_REFUND
from app.store.purchases import PURCHASE_GRANTED, PURCHASE_UNMATCHED

log = logging.getLogger("svc.purchases")

Result = Literal["applied", "duplicate", "kept", "ignored", "unmatched"]
CHANGE_ROUNDS = 20  # decisions on a purchase other events keep changing, before a 503
MAX_PURCHASE_CREDITS = 1_000_000_000_000  # what one purchase may grant (a typo's guard)
_CHANGES = ("refunded", "refund_reversed", "dispute_opened", "dispute_won")


class Purchases:
    """Applies a store's payment events to the ledger."""

    def __init__(
        self,
        store: Store,
        ledger: Ledger,
        accounts: Accounts,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.accounts = accounts
        self.clock = clock

    async def apply(self, source: str, event: PaymentEvent) -> Result:
        """Apply ``event`` from ``source`` once; what it came to."""
        if event.kind == "paid":
            return await self._purchase(source, event)
        if event.kind in _CHANGES and event.payment_intent:
            purchase = await self.store.purchase_of_payment(source, event.payment_intent)
            if purchase is None or (
                event.kind == "dispute_won" and await self._dispute_unseen(purchase, event)
            ):
                return await self._keep(source, event)  # its purchase (or dispute) first
            result = await self._change(purchase, event)
            if event.kind == "dispute_opened":
                await self._apply_kept(source, event.payment_intent)  # its win, kept before
            return result
        return "ignored"  # pending, failed, a dispute lost, a type svc does not read

    async def _purchase(self, source: str, event: PaymentEvent) -> Result:
        reference = event.session_id or event.payment_intent or event.event_id
        pid = event.account_pid or await self._account(event.client_reference_id)
        credits = event.credits if event.credits and event.credits <= MAX_PURCHASE_CREDITS else None
        matched = pid is not None and credits is not None
        now = int(self.clock())
        purchase = PurchaseRecord(
            purchase_id=f"{source}:{reference}",
            source=source,
            reference=reference,
            payment=event.payment_intent,
            account_ref=event.client_reference_id,
            account_pid=pid,
            credits=credits,
            amount=event.amount_total,
            currency=event.currency,
            status=PURCHASE_GRANTED if matched else PURCHASE_UNMATCHED,
            created_at=now,
        )
        entry = None
        if pid is not None and credits is not None:
            entry = _entry(purchase.purchase_id, pid, credits, "purchase", source, reference, now)
        stored, written = await self.store.record_purchase(purchase, entry)
        if stored.status == PURCHASE_UNMATCHED:
            if written:
                log.warning(
                    "purchase %s kept as unmatched (account or credits unknown)", stored.purchase_id
                )
            return "unmatched" if written else "duplicate"
        done = await self._apply_entry(stored.purchase_id)
        if stored.payment:
            await self._apply_kept(source, stored.payment)
        # the call whose script moved the credits says applied (two deliveries at once may
        # both find the entry pending: Redis applies it for one of them)
        return "applied" if done.status is ScriptStatus.OK else "duplicate"

    async def _account(self, reference: str | None) -> str | None:
        if not reference:
            return None
        try:
            return await self.accounts.account_reference(reference)
        except ApiError as unknown:
            if unknown.kind is ErrorKind.ACCOUNT_NOT_FOUND:
                return None
            raise

    async def _apply_entry(self, entry_id: str) -> Applied:
        """Apply a purchase's (or a change's) entry: a pending one now; one applied before
        answers DUPLICATE. An account Redis lost keeps it pending (the repair applies it
        once the account is restored): the store acknowledged it."""
        entry = await self.store.get_grant(entry_id)
        if entry is None:
            raise service_unavailable()  # written in the transaction just committed
        if entry.applied_at is not None:
            return Applied(ScriptStatus.DUPLICATE, entry)
        done = await self.ledger.apply(entry, take_back_when_missing=False)
        if done.status is ScriptStatus.ACCOUNT_MISSING:
            raise service_unavailable()
        return done

    async def _change(self, purchase: PurchaseRecord, event: PaymentEvent) -> Result:
        """A refund's or a dispute's change of a purchase, decided on the purchase as read
        and written only if it is still so (else decided again on the new read)."""
        if purchase.status != PURCHASE_GRANTED or purchase.account_pid is None:
            return "ignored"  # an unmatched purchase granted nothing to take back
        for _ in range(CHANGE_ROUNDS):
            change = await self._decide(purchase, event)
            if change is None:
                return "duplicate"
            outcome = await self.store.change_purchase(purchase, change)
            if outcome == "changed":  # another event came first: decide on the new row
                found = await self.store.get_purchase(purchase.purchase_id)
                if found is None:
                    raise service_unavailable()
                purchase = found
                continue
            if change.entry is None:  # a refund of what a dispute holds: no credit moves
                return "applied" if outcome == "written" else "duplicate"
            done = await self._apply_entry(change.entry.grant_id)  # a duplicate's: pending?
            return "applied" if done.status is ScriptStatus.OK else "duplicate"
        raise service_unavailable()

    async def _decide(self, purchase: PurchaseRecord, event: PaymentEvent) -> PurchaseChange | None:
        """What ``event`` changes of ``purchase`` (None: nothing, it was applied). The rules
        end at the same balance whatever order the events come in: a refund takes its
        cumulative share, first out of what an open dispute holds back (taken already),
        then out of the pools; a dispute holds back what refunds left; its win gives back
        what it holds then; a reversal of the refunds gives back what they took."""
        if event.kind in ("refunded", "refund_reversed"):
            return await self._refund_change(purchase, event)
        credits = purchase.credits or 0
        held = purchase.dispute_taken
        pid = purchase.account_pid or ""
        now = int(self.clock())
        source = purchase.source
        dispute = f"{purchase.purchase_id}:dispute:{event.dispute_id}"
        if event.kind == "dispute_opened":
            left = credits - purchase.refund_taken - held
            if left <= 0 or await self.store.get_grant(dispute) is not None:
                return None
            entry = _entry(dispute, pid, -left, "dispute", source, event.dispute_id, now)
            return PurchaseChange(purchase.refund_taken, held + left, entry)
        won = f"{dispute}:won"  # the dispute is open: _dispute_unseen kept it otherwise
        if held <= 0 or await self.store.get_grant(won) is not None:
            return None
        entry = _entry(won, pid, held, "dispute_won", source, event.dispute_id, now)
        return PurchaseChange(purchase.refund_taken, 0, entry)

    async def _refund_change(
        self, purchase: PurchaseRecord, event: PaymentEvent
    ) -> PurchaseChange | None:
        """A refund's, or a reversal's of the refunds. Their entries are numbered by the
        reversals before them, so a purchase refunded, reversed and refunded again gets a
        new entry each time (the same share refunded twice apart is two refunds)."""
        held, pid, now = purchase.dispute_taken, purchase.account_pid or "", int(self.clock())
        source, reversals = purchase.source, await self._reversals(purchase.purchase_id)
        if event.kind == "refund_reversed":
            money = _refund_money(purchase, 0, purchase.refund_taken, now)
            if purchase.refund_taken <= 0:
                return None if money is None else PurchaseChange(0, held, None, 0, money)
            entry_id = f"{purchase.purchase_id}:refund_reversed:{reversals + 1}"
            give = purchase.refund_taken
            entry = _entry(entry_id, pid, give, "refund_reversed", source, event.event_id, now)
            return PurchaseChange(0, held, entry, 0, money)
        credits = purchase.credits or 0
        share = credits_to_take(credits, event.amount or 1, event.amount_refunded or 0, 0)
        take = share - purchase.refund_taken
        refunded = purchase.amount_refunded
        if purchase.amount is not None:  # the money a refund of a share of it gave back
            refunded = max(
                refunded,
                amount_refunded(purchase.amount, event.amount or 1, event.amount_refunded or 0),
            )
        money = _refund_money(purchase, refunded, -max(take, 0), now)
        if take <= 0:  # no credit more to take: perhaps money (a refund of under a credit)
            return (
                None if money is None else PurchaseChange(share - take, held, None, refunded, money)
            )
        from_pools = take - min(take, held)
        refund: GrantRecord | None = None
        if from_pools:
            entry_id = f"{purchase.purchase_id}:refund:{share}"
            entry_id += f":{reversals}" if reversals else ""
            refund = _entry(entry_id, pid, -from_pools, "refund", source, event.event_id, now)
        return PurchaseChange(share, held - (take - from_pools), refund, refunded, money)

    async def _keep(self, source: str, event: PaymentEvent) -> Result:
        payment = event.payment_intent or ""
        kept = KeptEvent(
            event_id=f"{source}:{event.event_id}",
            source=source,
            payment=payment,
            body=msgspec.json.encode(event).decode(),
            created_at=int(self.clock()),
        )
        await self.store.keep_event(kept)
        # the purchase may have been stored while this was kept: it read no kept event then
        stored = await self.store.purchase_of_payment(source, payment) is not None
        if stored and kept.event_id in await self._apply_kept(source, payment):
            return "applied"
        return "kept"

    async def _apply_kept(self, source: str, payment: str) -> set[str]:
        """Apply the events kept for a payment whose purchase is stored, oldest first (a
        dispute's win kept before its opening waits for it): the ids of those applied."""
        applied: set[str] = set()
        progress = True
        while progress:  # a pass that applied a dispute's opening may free its win
            progress = False
            for kept in await self.store.kept_events(source, payment):
                event = msgspec.json.decode(kept.body, type=PaymentEvent)
                purchase = await self.store.purchase_of_payment(source, payment)
                if purchase is None:
                    return applied
                if event.kind == "dispute_won" and await self._dispute_unseen(purchase, event):
                    continue
                await self._change(purchase, event)
                await self.store.drop_kept_event(kept.event_id)
                applied.add(kept.event_id)
                progress = True
        return applied

    async def _reversals(self, purchase_id: str) -> int:
        """How many times the purchase's refunds were reversed (their entries are numbered
        from 1; a store that reverses refunds has few of them, and no disputes)."""
        done = 0
        while await self.store.get_grant(f"{purchase_id}:refund_reversed:{done + 1}"):
            done += 1
        return done

    async def _dispute_unseen(self, purchase: PurchaseRecord, event: PaymentEvent) -> bool:
        opened = f"{purchase.purchase_id}:dispute:{event.dispute_id}"
        return await self.store.get_grant(opened) is None


def _refund_money(
    purchase: PurchaseRecord, refunded: int, credits: int, now: int
) -> RevenueEntry | None:
    """The books' entry of a purchase's amount refunded becoming ``refunded`` (with
    ``credits`` taken back, or given back), None when it does not change. Written once,
    with the change that wins the purchase's compare-and-set (its id is random)."""
    moved = refunded - purchase.amount_refunded
    if moved == 0:
        return None
    return RevenueEntry(
        entry_id=f"{purchase.purchase_id}:refunded:{random_id('', 12)}",
        purchase_id=purchase.purchase_id,
        source=purchase.source,
        currency=purchase.currency or "",
        kind=REVENUE_REFUND,
        amount=-moved,
        credits=credits,
        created_at=now,
    )


def _entry(
    entry_id: str, pid: str, credits: int, kind: str, source: str, reference: str | None, now: int
) -> GrantRecord:
    return GrantRecord(
        grant_id=entry_id,
        account_pid=pid,
        pool="purchased",
        credits=credits,
        source=source,
        reference=reference,
        created_at=now,
        kind=kind,
        seq=new_seq(),
    )
