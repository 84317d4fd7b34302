"""The books of a range of UTC days (``GET /admin/v1/books``), per day and in total, worked
out from the store's sums (``Store.books_sums``) with integers only: money in micro-units
of its currency, credits whole (docs/operations.md, "The books", states the rounding).

- revenue: per store and currency, the purchases' amounts (gross), what refunds gave back
  (refunded) and the rest (net), as the stores reported them; the credits sold.
- credits: the ledger's entries by kind (sold, earned, granted, returned, taken back), the
  live credits charged (spent) and the earned credits that lapsed (expired).
- costs: what the live requests cost upstream, per alias, provider, model and currency,
  with the value of the credits they were charged and the margin.
- margins: per alias and currency, the value of the credits charged less their cost.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from app.books.value import CreditValue, revenue_values
from app.purchases.amounts import store_micros
from app.store import BooksSums, RevenueSum, UpstreamCostRollup
from app.store.books import COST_SUMS, REVENUE_PURCHASE

# the ledger's kinds (app.store.records.GrantRecord.kind) as the books' credit figures
KIND_FIGURES = {
    "purchase": "sold",
    "reward": "earned",
    "grant": "granted",
    "dispute_won": "returned",
    "refund_reversed": "returned",
    "refund": "taken_back",
    "dispute": "taken_back",
    "debit": "taken_back",
}


class RevenueLine(msgspec.Struct, kw_only=True):
    store: str
    currency: str | None  # None: the store reports no amount (Google Play)
    purchases: int
    refunds: int  # refund changes (a refund, or its reversal)
    credits_sold: int
    gross_micros: int | None  # None: not known (no amount reported)
    refunded_micros: int | None
    net_micros: int | None


class CreditFigures(msgspec.Struct, kw_only=True):
    sold: int = 0  # purchases' credits
    earned: int = 0  # spotlight rewards
    granted: int = 0  # operators' grants
    returned: int = 0  # given back: a dispute won, a refund reversed
    taken_back: int = 0  # refunds, disputes, operators' debits (debt included)
    spent: int = 0  # charged for live requests
    expired: int = 0  # earned credits that lapsed
    outstanding_change: int = 0  # in - out: the change of balances less debt


class CostLine(msgspec.Struct, kw_only=True):
    alias: str
    provider: str | None  # None: not known (a swept request, an event from before)
    model: str | None
    currency: str | None  # None: the models file names no cost for the upstream
    requests: int
    prompt_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    completion_tokens: int
    credits: int
    cost_micros: int | None
    estimated_requests: int  # billed on svc's estimate: the upstream reported no usage
    estimated_cost_micros: int | None
    value_micros: int | None  # the credits' value (None: no value in that currency)
    margin_micros: int | None


class MarginLine(msgspec.Struct, kw_only=True):
    alias: str
    currency: str | None
    credits: int
    cost_micros: int | None
    value_micros: int | None
    margin_micros: int | None


class BooksPeriod(msgspec.Struct, kw_only=True):
    day: str | None  # None: the total of the range
    revenue: list[RevenueLine]
    credits: CreditFigures
    costs: list[CostLine]
    margins: list[MarginLine]


class Books(msgspec.Struct, kw_only=True):
    object: str = "books"
    from_day: str = msgspec.field(name="from")
    to_day: str = msgspec.field(name="to")
    credit_values: list[CreditValue]  # per currency; none: no value known
    days: list[BooksPeriod]  # every day of the range, oldest first
    total: BooksPeriod


def _micros(part: RevenueSum) -> int | None:
    if part.amount is None or not part.currency:
        return None
    return store_micros(part.source, part.currency, part.amount)


def revenue_lines(parts: Iterable[RevenueSum]) -> list[RevenueLine]:
    """The revenue per store and currency of ``parts`` (a day's sums, or all the days')."""
    lines: dict[tuple[str, str], RevenueLine] = {}
    for part in parts:
        currency = part.currency.upper()  # Stripe writes "usd", the App Store "USD"
        line = lines.get((part.source, currency))
        if line is None:
            known = 0 if currency else None
            line = lines[part.source, currency] = RevenueLine(
                store=part.source,
                currency=currency or None,
                purchases=0,
                refunds=0,
                credits_sold=0,
                gross_micros=known,
                refunded_micros=known,
                net_micros=known,
            )
        micros = _micros(part)
        if part.kind == REVENUE_PURCHASE:
            line.purchases += part.entries
            line.credits_sold += part.credits
            if micros is not None and line.gross_micros is not None:
                line.gross_micros += micros
        else:
            line.refunds += part.entries
            if micros is not None and line.refunded_micros is not None:
                line.refunded_micros -= micros  # a refund's amount is negative
        if line.gross_micros is not None and line.refunded_micros is not None:
            line.net_micros = line.gross_micros - line.refunded_micros
    return sorted(lines.values(), key=lambda r: (r.store, r.currency or ""))


def credit_figures(ledger: Iterable[tuple[str, int]], spent: int, expired: int) -> CreditFigures:
    """The credit figures of ``ledger`` ((kind, credits asked) pairs), ``spent`` and
    ``expired``; a kind the books do not know counts by its sign (granted or taken back)."""
    figures = CreditFigures(spent=spent, expired=expired)
    for kind, credits in ledger:
        figure = KIND_FIGURES.get(kind, "granted" if credits >= 0 else "taken_back")
        change = -credits if figure == "taken_back" else credits
        setattr(figures, figure, getattr(figures, figure) + change)
    figures.outstanding_change = (
        figures.sold
        + figures.earned
        + figures.granted
        + figures.returned
        - figures.taken_back
        - spent
        - expired
    )
    return figures


def _cost_line(rollup: UpstreamCostRollup, values: dict[str, CreditValue]) -> CostLine:
    costed = bool(rollup.currency)
    value = values.get(rollup.currency) if costed else None
    worth = None if value is None else value.of(rollup.credits)
    return CostLine(
        alias=rollup.alias,
        provider=rollup.provider or None,
        model=rollup.upstream_model if rollup.provider else None,
        currency=rollup.currency or None,
        requests=rollup.requests,
        prompt_tokens=rollup.prompt_tokens,
        cached_tokens=rollup.cached_tokens,
        cache_write_tokens=rollup.cache_write_tokens,
        completion_tokens=rollup.completion_tokens,
        credits=rollup.credits,
        cost_micros=rollup.cost_micros if costed else None,
        estimated_requests=rollup.estimated_requests,
        estimated_cost_micros=rollup.estimated_cost_micros if costed else None,
        value_micros=worth,
        margin_micros=None if worth is None else worth - rollup.cost_micros,
    )


def cost_lines(
    rollups: Iterable[UpstreamCostRollup], values: dict[str, CreditValue]
) -> list[CostLine]:
    """One line per alias, provider, model and currency of ``rollups`` (summed over days)."""
    summed: dict[tuple[str, str, str, str], UpstreamCostRollup] = {}
    for r in rollups:
        key = (r.alias, r.provider, r.upstream_model, r.currency)
        before = summed.get(key)
        summed[key] = r if before is None else _plus(before, r)
    return [_cost_line(summed[key], values) for key in sorted(summed)]


def _plus(a: UpstreamCostRollup, b: UpstreamCostRollup) -> UpstreamCostRollup:
    sums = {name: getattr(a, name) + getattr(b, name) for name in COST_SUMS}
    return msgspec.structs.replace(a, **sums)


def margin_lines(costs: Iterable[CostLine], values: dict[str, CreditValue]) -> list[MarginLine]:
    """Per alias and currency: the credits charged, their cost, their value (worked out
    once, from the summed credits) and the margin."""
    lines: dict[tuple[str, str], MarginLine] = {}
    for c in costs:
        key = (c.alias, c.currency or "")
        line = lines.get(key)
        if line is None:
            line = lines[key] = MarginLine(
                alias=c.alias,
                currency=c.currency,
                credits=0,
                cost_micros=None if c.cost_micros is None else 0,
                value_micros=None,
                margin_micros=None,
            )
        line.credits += c.credits
        if line.cost_micros is not None and c.cost_micros is not None:
            line.cost_micros += c.cost_micros
    for line in lines.values():
        value = None if line.currency is None else values.get(line.currency)
        if value is not None and line.cost_micros is not None:
            line.value_micros = value.of(line.credits)
            line.margin_micros = line.value_micros - line.cost_micros
    return [lines[key] for key in sorted(lines)]


def _period(
    day: str | None,
    sums: BooksSums,
    values: dict[str, CreditValue],
) -> BooksPeriod:
    def mine(of_day: str) -> bool:
        return day is None or of_day == day

    costs = cost_lines((c for c in sums.costs if mine(c.day)), values)
    return BooksPeriod(
        day=day,
        revenue=revenue_lines(r for r in sums.revenue if mine(r.day)),
        credits=credit_figures(
            ((kind, n) for of_day, kind, n in sums.ledger if mine(of_day)),
            spent=sum(n for of_day, n in sums.spent if mine(of_day)),
            expired=sum(n for of_day, n in sums.expired if mine(of_day)),
        ),
        costs=costs,
        margins=margin_lines(costs, values),
    )


def make_books(
    first_day: str, days: list[str], sums: BooksSums, setting: CreditValue | None
) -> Books:
    """The books of ``days`` (``first_day`` to the last, each one) from their ``sums``; the
    credits valued at ``setting`` (``SVC_CREDIT_VALUE``), else at the period's net revenue
    per credit sold in each currency."""
    total_revenue = revenue_lines(sums.revenue)
    if setting is not None:
        values = {setting.currency: setting}
    else:
        net: dict[str, int] = {}
        sold: dict[str, int] = {}
        for line in total_revenue:
            if line.currency is not None and line.net_micros is not None:
                net[line.currency] = net.get(line.currency, 0) + line.net_micros
                sold[line.currency] = sold.get(line.currency, 0) + line.credits_sold
        values = revenue_values(net, sold)
    return Books(
        from_day=first_day,
        to_day=days[-1],
        credit_values=[values[c] for c in sorted(values)],
        days=[_period(day, sums, values) for day in days],
        total=_period(None, sums, values),
    )
