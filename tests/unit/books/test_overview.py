"""The overview across accounts (issue 52 item 4): every account's balance (Redis), debt and
live spend over the window (the rollups), sorted by spend, balance or creation, and the
totals of the credits outstanding and of the debt; a bad query is a 400 naming it."""

from __future__ import annotations

import msgspec
import pytest

from app.books.overview import OverviewQuery, account_overview, parse_overview
from app.core.errors import ApiError
from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from app.store import AccountRecord, Store, UsageRollup
from tests.conftest import Clock
from tests.support.ledgers import Ledgers

NOW = 1_780_000_000  # 2026-05-28


def _spend(pid: str, day: str, credits: int, environment: str = "live") -> UsageRollup:
    return UsageRollup(
        account_pid=pid,
        kid="k",
        day=day,
        alias="svc-fast",
        environment=environment,
        api="chat",
        requests=1,
        prompt_tokens=1,
        completion_tokens=1,
        credits=credits,
    )


async def test_the_overview_sorts_and_totals_every_account(
    redis: RedisClient, store: Store
) -> None:
    ledger = Ledgers(redis, KeySpace("svc", 8), cap_ttl_s=172_800, usage_ttl_s=3_456_000)
    pools = {"acct_A": (500, 0), "acct_B": (9_000, 0), "acct_C": (40, 0)}
    for n, (pid, (purchased, _)) in enumerate(pools.items()):
        await store.create_account(AccountRecord(pid=pid, created_at=NOW - 100 + n))
        await ledger.money.open_account(pid, purchased=purchased)
    usage = [
        _spend("acct_C", "2026-05-28", 300),
        _spend("acct_C", "2026-05-01", 10_000),  # before a 7-day window
        _spend("acct_A", "2026-05-25", 20),
        _spend("acct_B", "2026-05-28", 5_000, environment="test"),  # not spend
    ]
    assert await store.apply_usage(0, "1-0", usage)
    clock = Clock(NOW)
    by_spend = await account_overview(
        store, ledger.money, _query({"sort": "spend", "days": "7"}), clock()
    )
    assert [(s.id, s.spend) for s in by_spend.data] == [
        ("acct_C", 300),
        ("acct_A", 20),
        ("acct_B", 0),
    ]
    assert by_spend.since_day == "2026-05-22"
    totals = by_spend.totals
    assert (totals.accounts, totals.credits_outstanding, totals.debt, totals.spend) == (
        3,
        9_540,
        0,
        320,
    )
    by_balance = await account_overview(
        store, ledger.money, _query({"sort": "balance", "limit": "2"}), clock()
    )
    assert [s.id for s in by_balance.data] == ["acct_B", "acct_A"]
    assert by_balance.has_more
    assert by_balance.totals == msgspec.structs.replace(totals, spend=10_320)  # 30 days
    newest = await account_overview(store, ledger.money, _query({"sort": "created"}), clock())
    assert [s.id for s in newest.data] == ["acct_C", "acct_B", "acct_A"]


def _query(params: dict[str, str]) -> OverviewQuery:
    query = parse_overview(params)
    assert query is not None
    return query


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"sort": "debt"}, "sort"),
        ({"sort": "spend", "days": "0"}, "days"),
        ({"sort": "spend", "limit": "501"}, "limit"),
        ({"sort": "balance", "after": "acct_A"}, "after"),
    ],
)
def test_a_bad_overview_query_is_a_400_naming_it(params: dict[str, str], param: str) -> None:
    with pytest.raises(ApiError) as raised:
        parse_overview(params)
    assert raised.value.param == param


def test_without_sort_the_page_of_accounts_is_asked_for() -> None:
    assert parse_overview({"limit": "5"}) is None
