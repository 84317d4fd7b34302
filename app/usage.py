"""The usage summary of ``GET /v1/usage`` (spec 2.6): all-time totals and a daily window.

A key sees the usage of its own environment: a live key the account's live usage, a test
key what its account's test keys would have cost (DESIGN.md §2, test keys).
"""

from __future__ import annotations

import time

import msgspec

from app.errors import invalid_value

DEFAULT_DAYS = 30
MAX_DAYS = 366
COUNTERS = ("requests", "prompt_tokens", "completion_tokens", "credits")


class UsageCounters(msgspec.Struct, frozen=True):
    """Sums of settled requests."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    credits: int = 0


class DailyUsage(msgspec.Struct):
    day_bucket: str
    total_tokens: int
    credits_spent: int
    requests_count: int


class UsageSummary(msgspec.Struct):
    account_pid: str
    total_tokens: int
    credits_spent: int
    requests_count: int
    daily: list[DailyUsage]


def parse_days(raw: str | None) -> int:
    """The ``days`` query parameter: an integer from 1 to 366, default 30."""
    if raw is None or raw == "":
        return DEFAULT_DAYS
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_DAYS:
        raise invalid_value("days", f"'days' must be an integer from 1 to {MAX_DAYS}.")
    return int(raw)


def window(now: float, days: int) -> list[str]:
    """The ``days`` UTC days ending today, newest first, as ``YYYY-MM-DD``."""
    today = int(now) // 86_400
    return [time.strftime("%Y-%m-%d", time.gmtime((today - i) * 86_400)) for i in range(days)]


def summarize(
    pid: str, totals: UsageCounters, daily: list[tuple[str, UsageCounters]]
) -> UsageSummary:
    """The response body; ``daily`` is the window, newest first, zero days included."""
    return UsageSummary(
        account_pid=pid,
        total_tokens=totals.prompt_tokens + totals.completion_tokens,
        credits_spent=totals.credits,
        requests_count=totals.requests,
        daily=[
            DailyUsage(
                day_bucket=day,
                total_tokens=c.prompt_tokens + c.completion_tokens,
                credits_spent=c.credits,
                requests_count=c.requests,
            )
            for day, c in daily
        ],
    )
