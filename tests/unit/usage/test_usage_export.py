"""Usage as CSV rows: the JSON's daily fields, a row per day or per day and group."""

from __future__ import annotations

import csv
import io

import pytest

from app.core.errors import ApiError
from app.kv.fields import UsageCounters
from app.usage.export import parse_format, usage_rows
from app.usage.reader import summarize

DAYS = [("2026-11-24", UsageCounters(3, 10, 20, 7)), ("2026-11-23", UsageCounters(0, 0, 0, 0))]


def test_one_row_a_day_newest_first() -> None:
    summary = summarize("acct_A", UsageCounters(3, 10, 20, 7), DAYS)
    lines = list(usage_rows(summary, None))
    assert lines == [
        "day,requests_count,total_tokens,credits_spent\r\n",
        "2026-11-24,3,30,7\r\n",
        "2026-11-23,0,0,0\r\n",
    ]


def test_one_row_a_day_and_group_and_the_groups_sum_to_the_day() -> None:
    parts = {
        "2026-11-24": {"chat": UsageCounters(2, 6, 12, 5), "responses": UsageCounters(1, 4, 8, 2)}
    }
    summary = summarize("acct_A", UsageCounters(3, 10, 20, 7), DAYS, parts, "api")
    rows = list(csv.DictReader(io.StringIO("".join(usage_rows(summary, "api")))))
    assert rows == [
        {
            "day": "2026-11-24",
            "api": "chat",
            "requests_count": "2",
            "total_tokens": "18",
            "credits_spent": "5",
        },
        {
            "day": "2026-11-24",
            "api": "responses",
            "requests_count": "1",
            "total_tokens": "12",
            "credits_spent": "2",
        },
    ]
    assert sum(int(r["credits_spent"]) for r in rows) == summary.daily[0].credits_spent


@pytest.mark.parametrize(("raw", "expected"), [(None, "json"), ("", "json"), ("csv", "csv")])
def test_the_format_parameter(raw: str | None, expected: str) -> None:
    assert parse_format(raw) == expected


def test_an_unknown_format_names_the_parameter() -> None:
    with pytest.raises(ApiError) as info:
        parse_format("CSV")
    assert info.value.param == "format"
