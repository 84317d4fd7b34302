"""Usage and activity as CSV (``format=csv``). Usage (``GET /v1/usage``): one row per day,
or per day and group, newest first, written a row at a time.

Columns: ``day`` (ISO 8601, ``YYYY-MM-DD``), the ``group_by`` value's column when there is
one, then ``requests_count``, ``total_tokens`` and ``credits_spent``: the JSON's daily
fields, so a spreadsheet sums to the JSON's numbers. Activity (``GET /v1/activity``): one
row per request, newest first, read from the store a page at a time (``CSV_COLUMNS``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Callable, Iterator

import msgspec
from msgspec import UNSET

from app.core.clock import iso_utc
from app.core.errors import invalid_value
from app.store import ActivityRecord
from app.usage.activity import item
from app.usage.reader import GROUP_BY, UsageSummary

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


def line_writer() -> Callable[[list[str | int]], str]:
    """A function that turns a row's values into its CSV line (RFC 4180: quoted where
    needed, CRLF line end)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values: list[str | int]) -> str:
        writer.writerow(values)
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    return line


def usage_rows(summary: UsageSummary, group_by: str | None) -> Iterator[str]:
    """The CSV text of ``summary``'s days, a line at a time."""
    line = line_writer()
    name = None if group_by is None else GROUP_BY[group_by].name
    yield line(["day", *([name] if name else []), *COUNTS])
    for day in summary.daily:
        if name is None or day.groups is UNSET:
            yield line([day.day_bucket, day.requests_count, day.total_tokens, day.credits_spent])
            continue
        for group in day.groups:
            value = getattr(group, name)
            counts = [group.requests_count, group.total_tokens, group.credits_spent]
            yield line([day.day_bucket, value, *counts])


CSV_COLUMNS = (
    "created",
    "id",
    "key_id",
    "requested_model",
    "model",
    "api",
    "prompt_tokens",
    "completion_tokens",
    "credits_used",
    "outcome",
    "ttfb_ms",
    "duration_ms",
    "usage_source",
)
"""An activity CSV's columns: the JSON's fields, ``created`` as an ISO 8601 UTC time."""


async def activity_csv(rows: AsyncIterator[ActivityRecord]) -> AsyncIterator[str]:
    """The CSV text of ``rows``, a line at a time."""
    line = line_writer()
    yield line(list(CSV_COLUMNS))
    async for row in rows:
        fields = msgspec.structs.asdict(item(row))
        fields["created"] = iso_utc(row.created)
        yield line([fields[name] for name in CSV_COLUMNS])
