"""The books of a day with purchases, refunds, rewards, spend and an expiry (issue 52): equal
to the ledger and to the usage and cost rollups, to the micro-unit, on SQLite and
PostgreSQL; the worked example of docs/operations.md, "The books", figure by figure; the
day range, the credit value and the CSV form."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator

import msgspec
import pytest

from app.accounts.accounts import Accounts
from app.accounts.ledger import Ledger
from app.books.report import book_days, books_csv, read_books
from app.books.value import configured_value, setting_value
from app.completion.costs import CostEntry, cost_micros, upstream_cost
from app.core.clock import day_start
from app.core.errors import ApiError
from app.credits.outcomes import Tokens
from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from app.purchases.purchases import Purchases
from app.purchases.stripe_events import payment_event
from app.store import CreditExpiry, GrantRecord, Store, UpstreamCostRollup, UsageRollup
from tests.conftest import Clock
from tests.support import stripe_signing as stripe
from tests.support.databases import Database
from tests.support.ledgers import Ledgers

DAY = "2026-11-24"
NOON = (day_start(DAY) or 0) + 12 * 3600
COST = upstream_cost(CostEntry(input=0.4, cached_input=0.1, cache_write=0.4, output=1.6), "USD")
TOKENS = Tokens(prompt=12_000, completion=500, cached=8_000, cache_writes=1_000)


class Books:
    """A store, the ledger and Stripe's purchases on it, at noon of ``DAY``."""

    def __init__(self, redis: RedisClient, store: Store) -> None:
        self.store = store
        self.clock = Clock(NOON)
        ledgers = Ledgers(redis, KeySpace("svc", 8), cap_ttl_s=172_800, usage_ttl_s=3_456_000)
        self.ledger = Ledger(store, ledgers.money, clock=self.clock)
        self.accounts = Accounts(store, ledgers.money, ledger=self.ledger, clock=self.clock)
        self.purchases = Purchases(store, self.ledger, self.accounts, self.clock)

    async def stripe(self, body: bytes) -> str:
        return await self.purchases.apply("stripe", payment_event(body))


@pytest.fixture
async def books(redis: RedisClient, database: Database) -> AsyncIterator[Books]:
    store = database.open()
    await store.migrate()
    yield Books(redis, store)
    await store.close()


async def _a_day(b: Books) -> str:
    """The worked example's day, and a reward, a spotlight of another account, an expiry."""
    pid = await b.accounts.create_account()
    paid = stripe.checkout_session(account=pid, credits="100000", amount_total=1000)
    assert await b.stripe(paid) == "applied"
    refund = stripe.charge_refunded(amount=1000, amount_refunded=250)
    assert await b.stripe(refund) == "applied"
    assert await b.stripe(refund) == "duplicate"  # its money is counted once too
    reward = GrantRecord(
        grant_id="reward-1",
        account_pid=pid,
        pool="earned",
        credits=5_000,
        source="signed",
        reference="view-1",
        created_at=NOON,
        kind="reward",
        applied_at=NOON,
    )
    assert await b.store.insert_grant(reward)
    credits = 44  # svc-fast's: ceil((3,000 x 5 + 8,000 x 2 + 1,000 x 5 + 500 x 15) / 1,000)
    use = UsageRollup(
        account_pid=pid,
        kid="k1",
        day=DAY,
        alias="svc-fast",
        environment="live",
        api="chat",
        requests=1,
        prompt_tokens=12_000,
        completion_tokens=500,
        credits=credits,
    )
    cost = UpstreamCostRollup(
        day=DAY,
        alias="svc-fast",
        provider="openai",
        upstream_model="gpt-4.1-mini",
        currency="USD",
        environment="live",
        requests=1,
        prompt_tokens=12_000,
        cached_tokens=8_000,
        cache_write_tokens=1_000,
        completion_tokens=500,
        credits=credits,
        cost_micros=cost_micros(COST, TOKENS),
        estimated_requests=0,
        estimated_cost_micros=0,
    )
    # a test key's request: no spend, no cost in the books
    test_use = msgspec.structs.replace(use, environment="test", credits=999)
    test_cost = msgspec.structs.replace(cost, environment="test", credits=999, currency="")
    lapse = CreditExpiry(expiry_id="3:1-0", account_pid=pid, credits=7, expired_at=NOON)
    rollups, costs = [use, test_use], [cost, test_cost]
    assert await b.store.apply_usage(3, "1-0", rollups, costs=costs, expiries=[lapse])
    return pid


async def test_the_books_of_a_day_equal_the_ledger_and_the_rollups(books: Books) -> None:
    pid = await _a_day(books)
    found = await read_books(books.store, [DAY], None)
    (day,) = found.days
    assert day.day == DAY
    assert msgspec.structs.replace(found.total, day=DAY) == day  # one day: its total
    # the ledger: what each applied entry asked, by kind
    entries = await books.store.list_grants(pid)
    asked = {e.kind: e.credits - e.debt_change for e in entries}
    assert asked == {"purchase": 100_000, "refund": -25_000, "reward": 5_000}
    figures = day.credits
    assert (figures.sold, figures.taken_back, figures.earned) == (100_000, 25_000, 5_000)
    assert (figures.spent, figures.expired, figures.granted, figures.returned) == (44, 7, 0, 0)
    assert figures.outstanding_change == sum(asked.values()) - 44 - 7
    # the usage rollups (live): spent, and the costs' credits
    totals = await books.store.usage_totals(pid)
    assert totals is not None
    assert totals.credits == figures.spent
    (line,) = day.costs
    assert (line.alias, line.provider, line.model, line.currency) == (
        "svc-fast",
        "openai",
        "gpt-4.1-mini",
        "USD",
    )
    assert line.credits == figures.spent
    # the worked example, figure by figure
    (revenue,) = day.revenue
    assert (revenue.store, revenue.currency, revenue.purchases, revenue.refunds) == (
        "stripe",
        "USD",
        1,
        1,
    )
    assert revenue.credits_sold == 100_000
    assert (revenue.gross_micros, revenue.refunded_micros, revenue.net_micros) == (
        10_000_000,
        2_500_000,
        7_500_000,
    )
    assert line.cost_micros == 1_200 + 800 + 400 + 800
    (value,) = found.credit_values
    assert (value.currency, value.micros, value.credits) == ("USD", 7_500_000, 100_000)
    assert (line.value_micros, line.margin_micros) == (3_300, 100)
    (margin,) = day.margins
    assert (margin.credits, margin.cost_micros, margin.value_micros, margin.margin_micros) == (
        44,
        3_200,
        3_300,
        100,
    )


async def test_the_credit_value_setting_prices_the_margin(books: Books) -> None:
    await _a_day(books)
    found = await read_books(books.store, [DAY], setting_value("0.1 USD"))
    (margin,) = found.total.margins
    assert (margin.value_micros, margin.margin_micros) == (4_400, 1_200)
    other = await read_books(books.store, [DAY], setting_value("10 EUR"))
    (line,) = other.total.margins  # a cost in USD has no value in EUR
    assert (line.cost_micros, line.value_micros, line.margin_micros) == (3_200, None, None)


async def test_days_without_anything_are_there_and_zero(books: Books) -> None:
    await _a_day(books)
    days = book_days({"from": "2026-11-23", "to": "2026-11-25"}, NOON)
    found = await read_books(books.store, days, None)
    assert [d.day for d in found.days] == ["2026-11-23", DAY, "2026-11-25"]
    before, _, after = found.days
    for empty in (before, after):
        assert (empty.revenue, empty.costs, empty.margins) == ([], [], [])
        assert empty.credits.outstanding_change == 0
    assert found.total.credits == found.days[1].credits


async def test_the_csv_has_a_row_per_figure_and_sums_to_the_json(books: Books) -> None:
    await _a_day(books)
    found = await read_books(books.store, [DAY], None)
    rows = list(csv.DictReader(io.StringIO("".join(books_csv(found)))))
    net = [
        r
        for r in rows
        if (r["day"], r["section"], r["figure"]) == ("total", "revenue", "net_micros")
    ]
    assert [(r["store"], r["currency"], r["value"]) for r in net] == [("stripe", "USD", "7500000")]
    margins = [r for r in rows if r["section"] == "margins" and r["figure"] == "margin_micros"]
    assert {r["day"]: r["value"] for r in margins} == {DAY: "100", "total": "100"}


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"from": "2026-11-25", "to": "2026-11-24"}, "from"),
        ({"from": "2025-01-01", "to": "2026-11-24"}, "from"),
        ({"to": "24/11/2026"}, "to"),
        ({"from": "2026-02-30"}, "from"),
    ],
)
def test_a_bad_range_is_a_400_naming_it(params: dict[str, str], param: str) -> None:
    with pytest.raises(ApiError) as raised:
        book_days(params, NOON)
    assert raised.value.param == param


def test_the_default_range_is_the_30_days_that_end_today() -> None:
    days = book_days({}, NOON)
    assert (len(days), days[-1], days[0]) == (30, DAY, "2026-10-26")


def test_the_credit_value_setting_unset_values_credits_by_revenue() -> None:
    assert configured_value(None) is None
    assert configured_value(" 0.1 USD ") == setting_value("0.1 USD")
