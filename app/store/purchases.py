"""Purchases as the store keeps them (a part of ``SQLStore``): one row per store purchase
(``(source, reference)`` unique: a Checkout Session, an App Store transaction), written in
one transaction with its ledger entry; the credits refunds and disputes took back of it; and
the events about a payment svc has not seen yet, kept until its purchase arrives.

Refunds and disputes change a purchase with a compare-and-set on what was taken before
(``change_purchase``), in the transaction that writes their ledger entry: two events about
one purchase at once never both take what only one may (the second's set finds the row
changed and its caller decides again on the new row).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from app.store.books import INSERT_REVENUE, REVENUE_PURCHASE, RevenueEntry
from app.store.core import SQLCore
from app.store.ledger import DELETE_GRANT, INSERT_GRANT
from app.store.program import Program, execute, row
from app.store.records import GrantRecord, Row, to_record, to_row

PURCHASE_GRANTED = "granted"  # its credits were put on the ledger
PURCHASE_UNMATCHED = "unmatched"  # no account, or no credits named: an operator's to settle


class PurchaseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One purchase a store confirmed."""

    purchase_id: str  # "<source>:<reference>": its ledger entry's id too
    source: str  # stripe | apple | google
    reference: str  # the store's id of the purchase (a Checkout Session)
    payment: str | None  # the store's id of the payment refunds and disputes name
    account_ref: str | None  # the account as the store named it (acct_… or an external id)
    account_pid: str | None  # None: unmatched
    credits: int | None  # None: the purchase named none (unmatched)
    amount: int | None  # minor units of ``currency``
    currency: str | None
    status: str  # PURCHASE_GRANTED | PURCHASE_UNMATCHED
    created_at: int
    refund_taken: int = 0  # credits refunds took back so far
    dispute_taken: int = 0  # credits open disputes hold back
    amount_refunded: int = 0  # of amount, what the store refunded so far (its units)


class KeptEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An event about a payment svc has not seen a purchase of yet."""

    event_id: str  # "<source>:<the store's event id>"
    source: str
    payment: str
    body: str  # the normalized event, as JSON
    created_at: int


class PurchaseQuery(msgspec.Struct, frozen=True, kw_only=True):
    limit: int
    status: str | None = None
    after: tuple[int, str] | None = None  # (created_at, purchase_id) of the previous page


_P_COLUMNS = PurchaseRecord.__struct_fields__
_P_SELECT = f"SELECT {', '.join(_P_COLUMNS)} FROM purchases"
INSERT_PURCHASE = (
    f"INSERT INTO purchases ({', '.join(_P_COLUMNS)}) VALUES ({', '.join('?' * len(_P_COLUMNS))})"
    " ON CONFLICT DO NOTHING"  # its id or its (source, reference): both are the purchase's
)
GET_PURCHASE = f"{_P_SELECT} WHERE source = ? AND reference = ?"
GET_PURCHASE_BY_ID = f"{_P_SELECT} WHERE purchase_id = ?"
# the first purchase of a payment (a session has one PaymentIntent)
GET_PURCHASE_BY_PAYMENT = (
    f"{_P_SELECT} WHERE source = ? AND payment = ? ORDER BY created_at LIMIT 1"
)
SET_TAKEN = (
    "UPDATE purchases SET refund_taken = ?, dispute_taken = ?, amount_refunded = ? "
    "WHERE purchase_id = ? AND refund_taken = ? AND dispute_taken = ? AND amount_refunded = ?"
)
_K_COLUMNS = KeptEvent.__struct_fields__
INSERT_KEPT = (
    f"INSERT INTO purchase_events_kept ({', '.join(_K_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_K_COLUMNS))}) ON CONFLICT (event_id) DO NOTHING"
)
LIST_KEPT = (
    f"SELECT {', '.join(_K_COLUMNS)} FROM purchase_events_kept "
    "WHERE source = ? AND payment = ? ORDER BY created_at, event_id"
)
DELETE_KEPT = "DELETE FROM purchase_events_kept WHERE event_id = ?"
INSERT_TOKEN = (
    "INSERT INTO account_tokens (token, account_pid, created_at) VALUES (?, ?, ?) "
    "ON CONFLICT (token) DO NOTHING"
)
GET_TOKEN = "SELECT account_pid FROM account_tokens WHERE token = ?"
INSERT_NOTICE = (
    "INSERT INTO purchase_notices (notice_id, source, created_at) VALUES (?, ?, ?) "
    "ON CONFLICT (notice_id) DO NOTHING"
)
GET_NOTICE = "SELECT 1 FROM purchase_notices WHERE notice_id = ?"


def purchase_page(query: PurchaseQuery) -> tuple[str, Row]:
    where: list[str] = []
    args: list[Any] = []
    if query.status is not None:
        where.append("status = ?")
        args.append(query.status)
    if query.after is not None:
        where.append("(created_at, purchase_id) < (?, ?)")
        args += list(query.after)
    condition = f" WHERE {' AND '.join(where)}" if where else ""
    order = " ORDER BY created_at DESC, purchase_id DESC LIMIT ?"
    return f"{_P_SELECT}{condition}{order}", (*args, query.limit)


class PurchaseChange(msgspec.Struct, frozen=True):
    """What a refund or a dispute does to a purchase: its new totals and its entry (None:
    the balance does not move, a refund of credits an open dispute holds back already); a
    refund's (or its reversal's) new amount refunded (None: unchanged) and the money it
    moved (``revenue``: the books)."""

    refund_taken: int
    dispute_taken: int
    entry: GrantRecord | None
    amount_refunded: int | None = None
    revenue: RevenueEntry | None = None


def purchase_revenue(rec: PurchaseRecord) -> RevenueEntry:
    """A granted purchase as the books' revenue: its amount, of its day."""
    return RevenueEntry(
        entry_id=rec.purchase_id,
        purchase_id=rec.purchase_id,
        source=rec.source,
        currency=rec.currency or "",
        kind=REVENUE_PURCHASE,
        amount=rec.amount,
        credits=rec.credits or 0,
        created_at=rec.created_at,
    )


class PurchasesSQL(SQLCore):
    """``Store``'s purchase methods; what each promises is in ``Store``'s docstrings."""

    async def record_purchase(
        self, rec: PurchaseRecord, entry: GrantRecord | None
    ) -> tuple[PurchaseRecord, bool]:
        def write() -> Program[tuple[PurchaseRecord, bool]]:
            inserted = (yield from execute(INSERT_PURCHASE, to_row(rec))) == 1
            if inserted and entry is not None:
                yield from execute(INSERT_GRANT, to_row(entry))
                yield from execute(INSERT_REVENUE, to_row(purchase_revenue(rec)))
            found = yield from row(GET_PURCHASE, (rec.source, rec.reference))
            return (rec if found is None else to_record(PurchaseRecord, found)), inserted

        return await self._write(write())

    async def get_purchase(self, purchase_id: str) -> PurchaseRecord | None:
        return await self._record(PurchaseRecord, GET_PURCHASE_BY_ID, (purchase_id,))

    async def purchase_of_payment(self, source: str, payment: str) -> PurchaseRecord | None:
        return await self._record(PurchaseRecord, GET_PURCHASE_BY_PAYMENT, (source, payment))

    async def change_purchase(self, before: PurchaseRecord, change: PurchaseChange) -> str:
        entry = change.entry

        def write() -> Program[str]:
            # the entry first: a twin's (the same id) makes this a duplicate, nothing written
            if entry is not None and (yield from execute(INSERT_GRANT, to_row(entry))) != 1:
                return "duplicate"
            refunded = change.amount_refunded
            args = (
                change.refund_taken,
                change.dispute_taken,
                before.amount_refunded if refunded is None else refunded,
                before.purchase_id,
                before.refund_taken,
                before.dispute_taken,
                before.amount_refunded,
            )
            if (yield from execute(SET_TAKEN, args)) != 1:
                if entry is not None:  # another event changed the purchase first: undo
                    yield from execute(DELETE_GRANT, (entry.grant_id,))
                return "changed"
            if change.revenue is not None:  # the compare-and-set passed: once
                yield from execute(INSERT_REVENUE, to_row(change.revenue))
            return "written"

        return await self._write(write())

    async def keep_event(self, event: KeptEvent) -> bool:
        return bool(await self._write(execute(INSERT_KEPT, to_row(event))))

    async def kept_events(self, source: str, payment: str) -> list[KeptEvent]:
        return await self._records(KeptEvent, LIST_KEPT, (source, payment))

    async def drop_kept_event(self, event_id: str) -> None:
        await self._write(execute(DELETE_KEPT, (event_id,)))

    async def list_purchases(self, query: PurchaseQuery) -> list[PurchaseRecord]:
        return await self._records(PurchaseRecord, *purchase_page(query))

    async def save_account_token(self, token: str, account_pid: str, now: int) -> None:
        await self._write(execute(INSERT_TOKEN, (token, account_pid, now)))

    async def account_of_token(self, token: str) -> str | None:
        found = await self._rows(GET_TOKEN, (token,))
        return str(found[0][0]) if found else None

    async def notice_seen(self, notice_id: str) -> bool:
        return bool(await self._rows(GET_NOTICE, (notice_id,)))

    async def mark_notice(self, notice_id: str, source: str, now: int) -> bool:
        return bool(await self._write(execute(INSERT_NOTICE, (notice_id, source, now))))


__all__: Sequence[str] = [
    "PURCHASE_GRANTED",
    "PURCHASE_UNMATCHED",
    "KeptEvent",
    "PurchaseChange",
    "PurchaseQuery",
    "PurchaseRecord",
    "PurchasesSQL",
]
