"""Purchases as operators list them (``GET /admin/v1/purchases``, ``svc admin purchases``):
newest first, a page at a time, all or one status (``unmatched``: a paid purchase svc could
not grant, its account unknown or its credits unnamed, for an operator to settle)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec

from app.accounts.lookup import DEFAULT_LIMIT, MAX_LIMIT, MAX_QUERY_CHARS
from app.core.clock import iso_utc
from app.core.errors import invalid_value
from app.core.validation import query_int
from app.store import PurchaseQuery, PurchaseRecord, Store
from app.store.purchases import PURCHASE_GRANTED, PURCHASE_UNMATCHED

STATUSES = (PURCHASE_GRANTED, PURCHASE_UNMATCHED)


class PurchaseItem(msgspec.Struct, kw_only=True):
    object: Literal["purchase"] = "purchase"
    id: str
    source: str
    reference: str
    payment: str | None
    account_ref: str | None  # as the store named the account
    account_pid: str | None
    credits: int | None
    amount: int | None
    currency: str | None
    status: str
    refunded_credits: int
    disputed_credits: int
    created_at: str


class PurchaseList(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[PurchaseItem]
    has_more: bool


class PurchaseFilter(msgspec.Struct, frozen=True, kw_only=True):
    limit: int = DEFAULT_LIMIT
    status: str | None = None
    after: str | None = None  # the id of the purchase the page follows


def parse_purchase_filter(params: Mapping[str, str]) -> PurchaseFilter:
    """The query parameters ``status`` (granted, unmatched), ``limit`` and ``after``."""
    status = params.get("status")
    if status is not None and status not in STATUSES:
        raise invalid_value("status", f"'status' must be one of {', '.join(STATUSES)}.")
    after = params.get("after")
    if after is not None and (not after or len(after) > 4 * MAX_QUERY_CHARS):
        raise invalid_value("after", "'after' must be the id of a purchase of this list.")
    limit = query_int(params.get("limit"), "limit", low=1, high=MAX_LIMIT, default=DEFAULT_LIMIT)
    return PurchaseFilter(limit=limit, status=status, after=after)


def purchase_item(rec: PurchaseRecord) -> PurchaseItem:
    return PurchaseItem(
        id=rec.purchase_id,
        source=rec.source,
        reference=rec.reference,
        payment=rec.payment,
        account_ref=rec.account_ref,
        account_pid=rec.account_pid,
        credits=rec.credits,
        amount=rec.amount,
        currency=rec.currency,
        status=rec.status,
        refunded_credits=rec.refund_taken,
        disputed_credits=rec.dispute_taken,
        created_at=iso_utc(rec.created_at),
    )


async def purchase_list(store: Store, wanted: PurchaseFilter) -> PurchaseList:
    after = None
    if wanted.after is not None:
        found = await store.get_purchase(wanted.after)
        if found is None:
            raise invalid_value("after", "'after' must be the id of a purchase of this list.")
        after = (found.created_at, found.purchase_id)
    query = PurchaseQuery(limit=wanted.limit + 1, status=wanted.status, after=after)
    records = await store.list_purchases(query)
    items = [purchase_item(r) for r in records[: wanted.limit]]
    return PurchaseList(data=items, has_more=len(records) > wanted.limit)
