"""The reseller's books as the store keeps them (a part of ``SQLStore``): what each day's
requests cost upstream (``upstream_costs_daily``, written by the flusher with the usage
rollups), the money the stores reported for purchases and refunds (``revenue_entries``,
written in the purchase's own transactions), and the sums of a range of days the books
are made of (``books_sums``: one read transaction).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from app.core.clock import DAY_S, day_start, utc_day
from app.store.core import SQLCore
from app.store.program import Program, Transaction, rows
from app.store.records import Row

REVENUE_PURCHASE = "purchase"  # a purchase the store confirmed and svc granted
REVENUE_REFUND = "refund"  # money the store gave back (negative), or took back again


# Migration 24 (``app.store.migrations``): a request's upstream and its cost (operators only;
# NULL: not known), the costs per day, alias, provider's model and currency, the money
# stores reported (a purchase's amount; what each refund changed of the amount refunded,
# kept on the purchase so far), and the indexes the books' day ranges read. Purchases
# granted before are revenue of their day; their refunds' money was not kept.
BOOKS_SCHEMA = (
    "ALTER TABLE activity ADD COLUMN provider TEXT",
    "ALTER TABLE activity ADD COLUMN upstream_model TEXT",
    "ALTER TABLE activity ADD COLUMN cost_currency TEXT",
    "ALTER TABLE activity ADD COLUMN upstream_cost_micros BIGINT",
    """CREATE TABLE upstream_costs_daily (
        day TEXT NOT NULL,
        alias TEXT NOT NULL,
        provider TEXT NOT NULL,
        upstream_model TEXT NOT NULL,
        currency TEXT NOT NULL,
        environment TEXT NOT NULL,
        requests BIGINT NOT NULL,
        prompt_tokens BIGINT NOT NULL,
        cached_tokens BIGINT NOT NULL,
        cache_write_tokens BIGINT NOT NULL,
        completion_tokens BIGINT NOT NULL,
        credits BIGINT NOT NULL,
        cost_micros BIGINT NOT NULL,
        estimated_requests BIGINT NOT NULL,
        estimated_cost_micros BIGINT NOT NULL,
        PRIMARY KEY (day, alias, provider, upstream_model, currency, environment)
    )""",
    "ALTER TABLE purchases ADD COLUMN amount_refunded BIGINT NOT NULL DEFAULT 0",
    """CREATE TABLE revenue_entries (
        entry_id TEXT PRIMARY KEY,
        purchase_id TEXT NOT NULL,
        source TEXT NOT NULL,
        currency TEXT NOT NULL,
        kind TEXT NOT NULL,
        amount BIGINT,
        credits BIGINT NOT NULL,
        created_at BIGINT NOT NULL
    )""",
    "CREATE INDEX revenue_entries_created ON revenue_entries (created_at)",
    """INSERT INTO revenue_entries (entry_id, purchase_id, source, currency, kind, amount,
        credits, created_at)
    SELECT purchase_id, purchase_id, source, COALESCE(currency, ''), 'purchase', amount,
        COALESCE(credits, 0), created_at
    FROM purchases WHERE status = 'granted'""",
    "CREATE INDEX credit_grants_created ON credit_grants (created_at)",
    "CREATE INDEX credit_expiries_expired ON credit_expiries (expired_at)",
    "CREATE INDEX usage_daily_day ON usage_daily (day)",
)


class UpstreamCostRollup(msgspec.Struct, frozen=True, kw_only=True):
    """Settled requests of one UTC day through one alias, served by one provider's model,
    priced in one currency, in one environment; sums leave empty what they sum over."""

    day: str
    alias: str
    provider: str  # "": not known (a swept request, an event from before it was kept)
    upstream_model: str
    currency: str  # "": the models file names no cost for that upstream
    environment: str
    requests: int
    prompt_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    completion_tokens: int
    credits: int
    cost_micros: int  # micro-units of currency
    estimated_requests: int  # of requests, those billed on svc's estimate (no usage report)
    estimated_cost_micros: int  # of cost_micros, the estimated requests' part


class RevenueEntry(msgspec.Struct, frozen=True, kw_only=True):
    """Money a store reported: a purchase's amount, or what a refund (or its reversal)
    changed of the amount refunded, in the store's units of ``currency``."""

    entry_id: str
    purchase_id: str
    source: str  # stripe | apple | google
    currency: str  # "": the store reported none (Google Play)
    kind: str  # REVENUE_PURCHASE | REVENUE_REFUND
    amount: int | None  # signed; None: the store reported no amount
    credits: int  # the credits sold (a purchase), or taken back (-) or given back (+)
    created_at: int


class RevenueSum(msgspec.Struct, frozen=True, kw_only=True):
    """The revenue entries of one day, store, currency and kind, summed."""

    day: str
    source: str
    currency: str
    kind: str
    amount: int | None  # None: no entry had an amount
    credits: int
    entries: int


class BooksSums(msgspec.Struct, frozen=True, kw_only=True):
    """What the books of a range of days are made of, read at one instant."""

    costs: list[UpstreamCostRollup]  # live, per day, alias, provider, model and currency
    revenue: list[RevenueSum]
    ledger: list[tuple[str, str, int]]  # (day, kind, credits the entries asked)
    spent: list[tuple[str, int]]  # (day, live credits charged)
    expired: list[tuple[str, int]]  # (day, earned credits that lapsed)


_COST_KEY = ("day", "alias", "provider", "upstream_model", "currency", "environment")
COST_SUMS = tuple(f for f in UpstreamCostRollup.__struct_fields__ if f not in _COST_KEY)
_COST_COLUMNS = ", ".join(UpstreamCostRollup.__struct_fields__)
UPSERT_COSTS = (
    f"INSERT INTO upstream_costs_daily ({_COST_COLUMNS}) "
    f"VALUES ({', '.join('?' * len(UpstreamCostRollup.__struct_fields__))}) "
    f"ON CONFLICT ({', '.join(_COST_KEY)}) DO UPDATE SET "
    + ", ".join(f"{c} = upstream_costs_daily.{c} + excluded.{c}" for c in COST_SUMS)
)
COSTS_OF_DAYS = (
    f"SELECT {_COST_COLUMNS} FROM upstream_costs_daily WHERE environment = 'live' "
    "AND day >= ? AND day <= ? ORDER BY day, alias, provider, upstream_model, currency"
)
_REVENUE_COLUMNS = ", ".join(RevenueEntry.__struct_fields__)
INSERT_REVENUE = (
    f"INSERT INTO revenue_entries ({_REVENUE_COLUMNS}) "
    f"VALUES ({', '.join('?' * len(RevenueEntry.__struct_fields__))}) "
    "ON CONFLICT (entry_id) DO NOTHING"
)
# each group's amounts: SUM of NULLs is NULL (no amount known), COUNT(amount) how many knew
REVENUE_OF_DAYS = (
    f"SELECT created_at / {DAY_S}, source, currency, kind, SUM(amount), COUNT(amount), "
    "SUM(credits), COUNT(*) FROM revenue_entries WHERE created_at >= ? AND created_at < ? "
    f"GROUP BY created_at / {DAY_S}, source, currency, kind"
)
# what the ledger's applied entries asked (credits - debt_change), per day of their writing
LEDGER_OF_DAYS = (
    f"SELECT created_at / {DAY_S}, kind, SUM(credits - debt_change) FROM credit_grants "
    "WHERE applied_at IS NOT NULL AND created_at >= ? AND created_at < ? "
    f"GROUP BY created_at / {DAY_S}, kind"
)
SPENT_OF_DAYS = (
    "SELECT day, SUM(credits) FROM usage_daily WHERE environment = 'live' "
    "AND day >= ? AND day <= ? GROUP BY day"
)
# live credits each account was charged from a day on (the accounts' overview)
SPEND_BY_ACCOUNT = (
    "SELECT account_pid, SUM(credits) FROM usage_daily WHERE environment = 'live' "
    "AND day >= ? GROUP BY account_pid"
)
EXPIRED_OF_DAYS = (
    f"SELECT expired_at / {DAY_S}, SUM(credits) FROM credit_expiries "
    f"WHERE expired_at >= ? AND expired_at < ? GROUP BY expired_at / {DAY_S}"
)


def iso_day(day_number: object) -> str:
    """A day number (unix seconds // DAY_S, as a driver returns it) as ``YYYY-MM-DD``."""
    return utc_day(int(str(day_number)) * DAY_S)


def _revenue(row: Row) -> RevenueSum:
    day, source, currency, kind, amount, known, credits, entries = row
    return RevenueSum(
        day=iso_day(day),
        source=str(source),
        currency=str(currency),
        kind=str(kind),
        amount=int(amount) if int(known or 0) else None,
        credits=int(credits or 0),
        entries=int(entries),
    )


class BooksSQL(SQLCore):
    """``Store``'s books methods; what each promises is in ``Store``'s docstrings."""

    async def books_sums(self, first_day: str, last_day: str) -> BooksSums:
        start, end = _seconds(first_day), _seconds(last_day) + DAY_S

        def read() -> Program[BooksSums]:
            costs = yield from rows(COSTS_OF_DAYS, (first_day, last_day))
            revenue = yield from rows(REVENUE_OF_DAYS, (start, end))
            ledger = yield from rows(LEDGER_OF_DAYS, (start, end))
            spent = yield from rows(SPENT_OF_DAYS, (first_day, last_day))
            expired = yield from rows(EXPIRED_OF_DAYS, (start, end))
            return BooksSums(
                costs=[_cost(r) for r in costs],
                revenue=[_revenue(r) for r in revenue],
                ledger=[(iso_day(d), str(kind), int(n or 0)) for d, kind, n in ledger],
                spent=[(str(d), int(n or 0)) for d, n in spent],
                expired=[(iso_day(d), int(n or 0)) for d, n in expired],
            )

        return await self._run(read(), Transaction.SNAPSHOT)

    async def spend_by_account(self, since_day: str) -> dict[str, int]:
        found = await self._rows(SPEND_BY_ACCOUNT, (since_day,))
        return {str(pid): int(credits or 0) for pid, credits in found}


def _seconds(day: str) -> int:
    start = day_start(day)
    if start is None:
        raise ValueError(f"not a YYYY-MM-DD day: {day[:16]!r}")
    return start


def _cost(row: Row) -> UpstreamCostRollup:
    values = dict(zip(UpstreamCostRollup.__struct_fields__, row, strict=True))
    for name in COST_SUMS:
        values[name] = int(values[name] or 0)  # PostgreSQL's BIGINT may come as Decimal
    return msgspec.convert(values, UpstreamCostRollup)


__all__: Sequence[str] = [
    "REVENUE_PURCHASE",
    "REVENUE_REFUND",
    "BooksSQL",
    "BooksSums",
    "RevenueEntry",
    "RevenueSum",
    "UpstreamCostRollup",
]
