"""The usage summary of ``GET /v1/usage`` (spec 2.6): all-time totals and a daily window.

Exact at every moment, never double-counted: a day recent enough for Redis to hold its
counters (written by the settle script in the same atomic call that moves the credits) is
read from Redis; an older day, or one before this Redis's usage epoch (it lost its data and
started again), from the durable rollups the flusher writes. The two sources never serve
the same day. A key sees the usage of its own environment: a live key the account's live
usage, a test key what the account's test keys would have cost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import msgspec
from msgspec import UNSET, UnsetType

from app.core.clock import DAY_S, day_start, utc_day
from app.core.errors import invalid_value
from app.core.validation import query_int
from app.keys.format import public_id
from app.kv.fields import GROUP_KEY, GROUP_MODEL, UsageCounters

if TYPE_CHECKING:
    from app.credits.usage_counts import UsageCounts
    from app.store import Store, UsageRollup

DEFAULT_DAYS = 30
MAX_DAYS = 366


class Grouping(NamedTuple):
    """What a ``group_by`` value breaks a day down by."""

    column: str  # the UsageRollup field (the store's column)
    name: str  # what a group in the response (and a CSV column) names its value
    counted: str | None  # the day hash's group (``GROUPS``); None: by API (usage_field)
    shown: Callable[[str], str] = str  # a value as the response shows it


GROUP_BY = {
    "api": Grouping("api", "api", None),
    "key": Grouping("kid", "key_id", GROUP_KEY, public_id),
    "model": Grouping("alias", "model", GROUP_MODEL),
}
"""``group_by`` values: ``"key"`` gives groups ``{"key_id": …}``, ``"model"`` groups
``{"model": …}`` (the model served), ``"api"`` groups ``{"api": …}``."""


def _counters(rollup: UsageRollup) -> UsageCounters:
    return UsageCounters(
        rollup.requests, rollup.prompt_tokens, rollup.completion_tokens, rollup.credits
    )


class UsageGroup(msgspec.Struct, omit_defaults=True):
    """One part of a day's usage (``group_by``): the value it is grouped by, its sums."""

    total_tokens: int
    credits_spent: int
    requests_count: int
    api: str | UnsetType = UNSET
    key_id: str | UnsetType = UNSET
    model: str | UnsetType = UNSET


class DailyUsage(msgspec.Struct, omit_defaults=True):
    day_bucket: str
    total_tokens: int
    credits_spent: int
    requests_count: int
    groups: list[UsageGroup] | UnsetType = UNSET  # with group_by only


class UsageSummary(msgspec.Struct):
    account_pid: str
    total_tokens: int
    credits_spent: int
    requests_count: int
    daily: list[DailyUsage]


def parse_days(raw: str | None) -> int:
    """The ``days`` query parameter: an integer from 1 to 366, default 30."""
    return query_int(raw, "days", low=1, high=MAX_DAYS, default=DEFAULT_DAYS)


def parse_group_by(raw: str | None) -> str | None:
    """The ``group_by`` query parameter: absent, or one of ``GROUP_BY``."""
    if raw is None or raw == "":
        return None
    if raw not in GROUP_BY:
        raise invalid_value("group_by", f"'group_by' must be one of: {', '.join(GROUP_BY)}.")
    return raw


Groups = dict[str, UsageCounters]
"""A day's usage by the value it is grouped by."""


def window(now: float, days: int) -> list[str]:
    """The ``days`` UTC days ending today, newest first, as ``YYYY-MM-DD``."""
    today = int(now) // DAY_S
    return [utc_day((today - i) * DAY_S) for i in range(days)]


def summarize(
    pid: str,
    totals: UsageCounters,
    daily: list[tuple[str, UsageCounters]],
    groups: dict[str, Groups] | None = None,
    group_name: str = "",
) -> UsageSummary:
    """The response body; ``daily`` is the window, newest first, zero days included;
    ``groups`` (with ``group_by``) each day's parts by the value they are grouped by."""
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
                groups=UNSET if groups is None else _groups(groups.get(day, {}), group_name),
            )
            for day, c in daily
        ],
    )


def _groups(parts: Groups, group_name: str) -> list[UsageGroup]:
    """A day's parts that served requests, in the order of their values."""
    return [
        msgspec.structs.replace(
            UsageGroup(
                total_tokens=c.prompt_tokens + c.completion_tokens,
                credits_spent=c.credits,
                requests_count=c.requests,
            ),
            **{group_name: value},
        )
        for value, c in sorted(parts.items())
        if c.requests
    ]


def first_redis_day(now: float, epoch: int, retention_s: int) -> str:
    """The oldest day Redis holds complete counters for: within the counters' lifetime
    (less a day of margin: a day's hash lives ``retention_s`` after its last request) and
    not before this Redis's usage epoch."""
    by_retention = int(now) // DAY_S - (retention_s // DAY_S - 2)
    return utc_day(max(by_retention, epoch // DAY_S) * DAY_S)


def redis_days(now: float, first: str) -> list[str]:
    """The days from ``first`` (see ``first_redis_day``) to today, newest first, at most
    ``MAX_DAYS`` of them: the days read from Redis."""
    return [d for d in window(now, MAX_DAYS) if d >= first]


def epoch_after(last_durable_day: str | None) -> int:
    """The epoch a Redis without one starts: the day after the last day the durable store
    has rollups for (that day and older are read from there), or 0 when it has none."""
    start = None if last_durable_day is None else day_start(last_durable_day)
    return 0 if start is None else start + DAY_S


def _sum(parts: Groups) -> UsageCounters:
    total = UsageCounters()
    for counters in parts.values():
        total = total.plus(counters)
    return total


class UsageReader:
    """Builds usage summaries from Redis counters and durable rollups."""

    def __init__(self, counts: UsageCounts, store: Store, *, retention_s: int) -> None:
        self.counts = counts
        self.store = store
        self.retention_s = retention_s

    async def epoch(self, *, groups: bool = False) -> int:
        """This Redis's usage epoch (``groups``: of its per-key and per-model counters),
        started now if it has none (see ``epoch_after``)."""
        epoch = await self.counts.usage_epoch(groups=groups)
        if epoch is None:
            epoch = await self.counts.start_usage_epoch(
                epoch_after(await self.store.last_usage_day()), groups=groups
            )
        return epoch

    async def start_epochs(self) -> None:
        """Start both epochs of a new or emptied Redis (or one that has only the first:
        it was written by versions of svc before per-key and per-model counters)."""
        await self.epoch()
        await self.epoch(groups=True)

    async def summary(
        self, pid: str, environment: str, now: float, days: int, group_by: str | None = None
    ) -> UsageSummary:
        """All-time totals and the last ``days`` UTC days of ``pid`` in ``environment``;
        with ``group_by`` (``GROUP_BY``) each day's parts as well, summing to the day."""
        wanted = window(now, days)
        grouping = None if group_by is None else GROUP_BY[group_by]
        epoch = await self.epoch()
        if grouping is not None and grouping.counted is not None:
            epoch = max(epoch, await self.epoch(groups=True))
        first = first_redis_day(now, epoch, self.retention_s)
        recent = redis_days(now, first)
        groups: dict[str, Groups] | None = None
        if grouping is None:
            from_redis = await self.counts.usage_days(pid, environment, recent) if recent else {}
        else:
            if grouping.counted is None:
                groups = await self.counts.usage_days_by_api(pid, environment, recent)
            else:
                groups = await self.counts.usage_days_grouped(
                    pid, environment, recent, grouping.counted
                )
            from_redis = {day: _sum(parts) for day, parts in groups.items()}
        # Days from ``first`` on come from Redis; every older day from the store, the
        # window's days and the sum of all of them each read in one statement.
        durable: dict[str, UsageCounters] = {}
        column = None if grouping is None else grouping.column
        for r in await self.store.usage_daily(pid, wanted[-1], environment, group_by=column):
            if r.day >= first:
                continue
            durable[r.day] = durable.get(r.day, UsageCounters()).plus(_counters(r))
            if groups is not None and column is not None:
                groups.setdefault(r.day, {})[getattr(r, column)] = _counters(r)
        before = await self.store.usage_totals(pid, environment, before_day=first)
        totals = UsageCounters() if before is None else _counters(before)
        for counters in from_redis.values():
            totals = totals.plus(counters)
        daily = [
            (d, from_redis[d] if d >= first else durable.get(d, UsageCounters())) for d in wanted
        ]
        if grouping is None or groups is None:
            return summarize(pid, totals, daily)
        shown = {
            day: {grouping.shown(value): c for value, c in parts.items()}
            for day, parts in groups.items()
        }
        return summarize(pid, totals, daily, shown, grouping.name)
