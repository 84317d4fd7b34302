"""Usage as CSV (``GET /v1/usage?format=csv``): one row per day, or per day and group,
newest first, written a row at a time.

Columns: ``day`` (ISO 8601, ``YYYY-MM-DD``), the ``group_by`` value's column when there is
one, then ``requests_count``, ``total_tokens`` and ``credits_spent``: the JSON's daily
fields, so a spreadsheet sums to the JSON's numbers.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from msgspec import UNSET

from app.core.errors import invalid_value
from app.usage.reader import UsageSummary

FORMATS = ("json", "csv")
CSV_MEDIA_TYPE = "text/csv"  # the framework adds "; charset=utf-8"
COUNTS = ("requests_count", "total_tokens", "credits_spent")


def parse_format(raw: str | None) -> str:
    """The ``format`` query parameter: json (the default) or csv."""
    if raw is None or raw == "":
        return "json"
    if raw not in FORMATS:
        raise invalid_value("format", f"'format' must be one of: {', '.join(FORMATS)}.")
    return raw


def usage_rows(summary: UsageSummary, group_by: str | None) -> Iterator[str]:
    """The CSV text of ``summary``'s days, a line at a time (RFC 4180: CRLF line ends)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values: list[str | int]) -> str:
        writer.writerow(values)
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    yield line(["day", *([group_by] if group_by else []), *COUNTS])
    for day in summary.daily:
        if group_by is None or day.groups is UNSET:
            yield line([day.day_bucket, day.requests_count, day.total_tokens, day.credits_spent])
            continue
        for group in day.groups:
            value = getattr(group, group_by)
            counts = [group.requests_count, group.total_tokens, group.credits_spent]
            yield line([day.day_bucket, value, *counts])
