"""The usage window and summary arithmetic."""

from __future__ import annotations

import pytest

from app.errors import ApiError
from app.usage import DEFAULT_DAYS, UsageCounters, parse_days, summarize, window


@pytest.mark.parametrize(
    ("raw", "days"), [(None, DEFAULT_DAYS), ("", DEFAULT_DAYS), ("1", 1), ("366", 366)]
)
def test_days_accepted(raw: str | None, days: int) -> None:
    assert parse_days(raw) == days


@pytest.mark.parametrize("raw", ["0", "367", "-1", "7.5", "seven", " 7", "1e2"])
def test_days_refused_with_param(raw: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_days(raw)
    assert info.value.status == 400
    assert info.value.param == "days"


def test_window_is_newest_first_across_a_month_and_year_end() -> None:
    new_year_noon = 1_767_268_800  # 2026-01-01T12:00:00Z
    assert window(new_year_noon, 3) == ["2026-01-01", "2025-12-31", "2025-12-30"]
    assert window(new_year_noon - 12 * 3600, 1) == ["2026-01-01"]  # midnight is the new day
    assert window(new_year_noon - 12 * 3600 - 1, 1) == ["2025-12-31"]


def test_summary_adds_prompt_and_completion_tokens() -> None:
    totals = UsageCounters(requests=3, prompt_tokens=10, completion_tokens=20, credits=7)
    daily = [("2026-01-02", UsageCounters(1, 2, 3, 4)), ("2026-01-01", UsageCounters())]
    summary = summarize("acct_X", totals, daily)
    assert (summary.total_tokens, summary.credits_spent, summary.requests_count) == (30, 7, 3)
    assert [
        (d.day_bucket, d.total_tokens, d.credits_spent, d.requests_count) for d in summary.daily
    ] == [
        ("2026-01-02", 5, 4, 1),
        ("2026-01-01", 0, 0, 0),
    ]
