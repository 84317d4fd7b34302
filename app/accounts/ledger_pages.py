"""An account's credit ledger as its keys and its operators read it (``GET
/v1/credits/ledger``, ``GET /admin/v1/accounts/{pid}/ledger``): the entries of
``app.accounts.ledger`` and the earned credits that lapsed, newest first, in pages.

``after`` is the ``id`` of the last entry of the previous page, as in OpenAI's lists. An
entry's ``credits`` is how its pools moved (signed), ``debt_change`` how its debt did; a
pending entry (``status: pending``: durable, not yet applied to the balance) shows what it
asks in ``credits``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec

from app.accounts.ledger import INTAKE_KINDS, OPERATOR_SOURCE, TAKE_BACK_KINDS
from app.accounts.lookup import DEFAULT_LIMIT, MAX_LIMIT, MAX_QUERY_CHARS
from app.core.clock import iso_utc
from app.core.errors import invalid_value
from app.core.validation import query_int
from app.store import CreditExpiry, GrantRecord, Store
from app.store.ledger import EXPIRY_KIND

# Sources rows written before the ledger had names for them (``GrantRecord.source``).
_OLD_SOURCES = {"admin": OPERATOR_SOURCE}
_OLD_REWARD_SOURCE = "spotlight"  # the network is the entry id's first part


class CreditEntry(msgspec.Struct, kw_only=True):
    """One entry of an account's ledger (``credit.entry``)."""

    object: Literal["credit.entry"] = "credit.entry"
    id: str
    kind: str  # purchase | reward | grant | refund | dispute | dispute_won | debit | expiry
    # | refund_reversed
    pool: str  # purchased | earned
    credits: int  # signed: how the pools moved
    debt_change: int  # signed: how the debt moved
    source: str  # stripe, apple, google, admob, signed, operator, dev, svc (an expiry)
    reference: str | None
    reason: str | None
    status: Literal["applied", "pending"]
    created_at: str  # ISO 8601 UTC


class LedgerList(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[CreditEntry]
    has_more: bool


KINDS = (*INTAKE_KINDS, *TAKE_BACK_KINDS, EXPIRY_KIND)
"""Every kind of entry a ledger lists: the ledger's own, and the lapses."""


class LedgerFilter(msgspec.Struct, frozen=True, kw_only=True):
    limit: int = DEFAULT_LIMIT
    after: str | None = None  # the id of the entry the page follows
    kinds: tuple[str, ...] = ()  # only these kinds (none: every kind)


def parse_ledger_filter(params: Mapping[str, str]) -> LedgerFilter:
    """The query parameters ``limit`` (1-500, default 100), ``after`` and ``kind`` (kinds,
    comma-separated)."""
    after = params.get("after")
    if after is not None and (
        after == "" or len(after) > MAX_QUERY_CHARS * 4 or not after.isprintable()
    ):
        raise invalid_value("after", "'after' must be the id of an entry of this ledger.")
    kinds: tuple[str, ...] = ()
    if (named := params.get("kind")) is not None:
        kinds = tuple(dict.fromkeys(k.strip() for k in named.split(",")))
        if not kinds or any(k not in KINDS for k in kinds):
            raise invalid_value("kind", f"'kind' must name kinds of {', '.join(KINDS)}.")
    return LedgerFilter(
        limit=query_int(params.get("limit"), "limit", low=1, high=MAX_LIMIT, default=DEFAULT_LIMIT),
        after=after,
        kinds=kinds,
    )


def entry_source(entry: GrantRecord) -> str:
    """The entry's source, rows of before the ledger named as the ledger names them."""
    if entry.source == _OLD_REWARD_SOURCE:
        network = entry.grant_id.partition(":")[0]
        return OPERATOR_SOURCE if network == _OLD_REWARD_SOURCE else network
    return _OLD_SOURCES.get(entry.source, entry.source)


def credit_entry(entry: GrantRecord) -> CreditEntry:
    return CreditEntry(
        id=entry.grant_id,
        kind=entry.kind,
        pool=entry.pool,
        credits=entry.credits,
        debt_change=entry.debt_change,
        source=entry_source(entry),
        reference=entry.reference,
        reason=entry.reason,
        status="pending" if entry.applied_at is None else "applied",
        created_at=iso_utc(entry.created_at),
    )


def expiry_entry(lapse: CreditExpiry) -> CreditEntry:
    return CreditEntry(
        id=lapse.expiry_id,
        kind=EXPIRY_KIND,
        pool="earned",
        credits=-lapse.credits,
        debt_change=0,
        source="svc",
        reference=None,
        reason=None,
        status="applied",
        created_at=iso_utc(lapse.expired_at),
    )


async def ledger_list(store: Store, pid: str, wanted: LedgerFilter) -> LedgerList:
    """A page of the account's ledger, newest first; 400 naming ``after`` when it names no
    entry of this account."""
    position = None
    if wanted.after is not None:
        position = await store.ledger_position(pid, wanted.after)
        if position is None:
            raise invalid_value("after", "'after' must be the id of an entry of this ledger.")
    grants, lapses = await store.ledger_page(pid, wanted.limit + 1, position, wanted.kinds)
    merged = sorted(
        [((g.created_at, g.seq, g.grant_id), credit_entry(g)) for g in grants]
        + [((e.expired_at, 0, e.expiry_id), expiry_entry(e)) for e in lapses],
        key=lambda item: item[0],
        reverse=True,
    )
    page = [entry for _, entry in merged[: wanted.limit]]
    return LedgerList(data=page, has_more=len(merged) > wanted.limit)
