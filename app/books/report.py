"""``GET /admin/v1/books`` and ``svc admin books``: the query (``from``, ``to``: UTC days,
both included), the books of its days read from the store, and their CSV form (one row
per figure, so a spreadsheet pivots it)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import msgspec

from app.books.figures import Books, BooksPeriod, make_books
from app.books.value import CreditValue
from app.core.clock import DAY_S, day_start, utc_day
from app.core.errors import invalid_value
from app.store import Store
from app.usage.export import line_writer

MAX_DAYS = 366
DEFAULT_DAYS = 30
CSV_COLUMNS = ("day", "section", "store", "alias", "provider", "model", "currency", "figure")
"""A CSV row's columns before its ``value``; ``day`` is ``total`` for the range's total."""


def _day(params: Mapping[str, str], name: str, default: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    start = day_start(raw)
    if start is None or start < 0:  # nothing before 1970 was ever sold or served
        raise invalid_value(name, f"'{name}' must be a UTC day, YYYY-MM-DD, from 1970 on.")
    return start


def book_days(params: Mapping[str, str], now: float) -> list[str]:
    """The days ``from`` and ``to`` name, oldest first (``to`` defaults to today, ``from``
    to the 30 days that end on ``to``); a 400 for a range backwards or over 366 days."""
    last = _day(params, "to", int(now) // DAY_S * DAY_S)
    first = _day(params, "from", last - (DEFAULT_DAYS - 1) * DAY_S)
    if first > last:
        raise invalid_value("from", "'from' must not be after 'to'.")
    if (last - first) // DAY_S >= MAX_DAYS:
        raise invalid_value("from", f"The books cover at most {MAX_DAYS} days at once.")
    return [utc_day(t) for t in range(first, last + DAY_S, DAY_S)]


async def read_books(store: Store, days: list[str], value: CreditValue | None) -> Books:
    """The books of ``days``, from one consistent read of the store."""
    sums = await store.books_sums(days[0], days[-1])
    return make_books(days[0], days, sums, value)


def _rows(period: BooksPeriod) -> Iterator[list[str | int | None]]:
    day = period.day or "total"
    for r in period.revenue:
        for figure, value in msgspec.structs.asdict(r).items():
            if figure not in ("store", "currency"):
                yield [day, "revenue", r.store, "", "", "", r.currency, figure, value]
    for figure, value in msgspec.structs.asdict(period.credits).items():
        yield [day, "credits", "", "", "", "", "", figure, value]
    for c in period.costs:
        for figure, value in msgspec.structs.asdict(c).items():
            if figure not in ("alias", "provider", "model", "currency"):
                yield [day, "costs", "", c.alias, c.provider, c.model, c.currency, figure, value]
    for m in period.margins:
        for figure, value in msgspec.structs.asdict(m).items():
            if figure not in ("alias", "currency"):
                yield [day, "margins", "", m.alias, "", "", m.currency, figure, value]


def books_csv(books: Books) -> Iterator[str]:
    """``books`` as CSV lines: a header, then one row per figure of each day and of the
    total (an empty value: not known)."""
    line = line_writer()
    yield line([*CSV_COLUMNS, "value"])
    for period in [*books.days, books.total]:
        for row in _rows(period):
            yield line(["" if v is None else v for v in row])
