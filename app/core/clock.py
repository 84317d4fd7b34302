"""The calendar svc counts in: UTC days, in the forms they take in keys, the API and logs."""

from __future__ import annotations

import calendar
import time
from datetime import datetime

DAY_S = 86_400
"""Seconds in a UTC day (no leap seconds in unix time)."""


def utc_day(now: float) -> str:
    """``YYYY-MM-DD`` of a unix time, in UTC."""
    return time.strftime("%Y-%m-%d", time.gmtime(now))


def day_start(day: str) -> int | None:
    """Unix seconds at 00:00 UTC of a ``YYYY-MM-DD`` day; None when it is not one."""
    if len(day) != 10:
        return None
    try:
        return calendar.timegm(time.strptime(day, "%Y-%m-%d"))
    except ValueError:
        return None


def day_tag(day: str) -> str:
    """The compact form a day takes in Redis key names (``YYYYMMDD``)."""
    return day.replace("-", "")


def seconds_to_utc_midnight(now: float) -> int:
    """Seconds until the next UTC day starts (at least 1): when a daily cap resets."""
    return max(1, DAY_S - int(now) % DAY_S)


def iso_utc(ts: int) -> str:
    """A unix time as the API shows it: ``YYYY-MM-DDThh:mm:ssZ``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def parse_iso_utc(text: str) -> int | None:
    """An ISO 8601 time with its offset (``2027-01-31T00:00:00Z``, ``…+02:00``) as unix
    seconds (fractions dropped); None when it is not one (no offset, not a time)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return int(moment.timestamp())
