"""The overview across accounts (``GET /admin/v1/accounts?sort=…``, ``svc admin accounts
--sort …``): every account's balance, debt and live spend over a window of days, the top of
them by spend, balance or creation, and the totals a reseller owes and is owed: the credits
outstanding (its liability) and the debt.

Balances are read from Redis (every account, a pipelined batch at a time); the spend from
the durable rollups, which the flusher keeps a second or so behind Redis.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec

from app.accounts.lookup import DEFAULT_LIMIT, MAX_LIMIT
from app.core.clock import DAY_S, utc_day
from app.core.errors import invalid_value
from app.core.validation import query_int
from app.credits.money import Money
from app.store import Store

SORTS = ("spend", "balance", "created")
DEFAULT_DAYS = 30
MAX_DAYS = 366


class OverviewQuery(msgspec.Struct, frozen=True, kw_only=True):
    sort: str  # one of SORTS: the largest first (created: the newest)
    days: int = DEFAULT_DAYS  # the spend's window: today and the days before
    limit: int = DEFAULT_LIMIT


class AccountStanding(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["account.standing"] = "account.standing"
    created_at: int
    status: str
    earned: int  # earned credits available (0 once expired)
    purchased: int
    balance: int  # earned + purchased
    debt: int  # credits owed
    spend: int  # live credits charged in the window


class OverviewTotals(msgspec.Struct, kw_only=True):
    accounts: int
    credits_outstanding: int  # every account's balance: what the reseller still owes
    earned_outstanding: int
    purchased_outstanding: int
    debt: int  # what accounts owe
    spend: int  # live credits charged in the window, every account


class AccountOverview(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    sort: str
    days: int
    since_day: str  # the window's first day (UTC); it ends today
    data: list[AccountStanding]
    has_more: bool
    totals: OverviewTotals


def parse_overview(params: Mapping[str, str]) -> OverviewQuery | None:
    """``sort`` (spend, balance, created), ``days`` (1-366, default 30) and ``limit``
    (1-500, default 100); None without ``sort`` (the page of accounts is asked for)."""
    sort = params.get("sort")
    if sort is None or sort == "":
        return None
    if sort not in SORTS:
        raise invalid_value("sort", f"'sort' must be one of {', '.join(SORTS)}.")
    for other in ("after", "query", "external_id"):
        if params.get(other):
            raise invalid_value(other, f"'{other}' lists a page of accounts: not with 'sort'.")
    return OverviewQuery(
        sort=sort,
        days=query_int(params.get("days"), "days", low=1, high=MAX_DAYS, default=DEFAULT_DAYS),
        limit=query_int(params.get("limit"), "limit", low=1, high=MAX_LIMIT, default=DEFAULT_LIMIT),
    )


async def account_overview(
    store: Store, money: Money, query: OverviewQuery, now: float
) -> AccountOverview:
    """Every account's standing, the first ``query.limit`` of them by ``query.sort`` (ties:
    the newest first), and the totals of all of them."""
    since_day = utc_day(now - (query.days - 1) * DAY_S)
    accounts = await store.list_accounts()
    spend = await store.spend_by_account(since_day)
    balances = await money.account_balances([a.pid for a in accounts], now)
    standings = []
    for record, balance in zip(accounts, balances, strict=True):
        earned = 0 if balance is None else balance.earned
        purchased = 0 if balance is None else balance.purchased
        standings.append(
            AccountStanding(
                id=record.pid,
                created_at=record.created_at,
                status=record.status,
                earned=earned,
                purchased=purchased,
                balance=earned + purchased,
                debt=0 if balance is None else balance.debt,
                spend=spend.get(record.pid, 0),
            )
        )
    totals = OverviewTotals(
        accounts=len(standings),
        credits_outstanding=sum(s.balance for s in standings),
        earned_outstanding=sum(s.earned for s in standings),
        purchased_outstanding=sum(s.purchased for s in standings),
        debt=sum(s.debt for s in standings),
        spend=sum(s.spend for s in standings),
    )
    standings.sort(key=lambda s: (_measure(s, query.sort), s.created_at, s.id), reverse=True)
    return AccountOverview(
        sort=query.sort,
        days=query.days,
        since_day=since_day,
        data=standings[: query.limit],
        has_more=len(standings) > query.limit,
        totals=totals,
    )


def _measure(standing: AccountStanding, sort: str) -> int:
    if sort == "spend":
        return standing.spend
    if sort == "balance":
        return standing.balance
    return standing.created_at
