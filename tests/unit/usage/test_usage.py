"""The usage window and summary arithmetic."""

from __future__ import annotations

import msgspec
import pytest

from app.core.errors import ApiError
from app.store import UsageRollup
from app.usage.reader import (
    DEFAULT_DAYS,
    UsageCounters,
    UsageReader,
    epoch_after,
    first_redis_day,
    parse_days,
    parse_group_by,
    summarize,
    window,
)

DAY = 86_400


@pytest.mark.parametrize(
    ("raw", "days"), [(None, DEFAULT_DAYS), ("", DEFAULT_DAYS), ("1", 1), ("366", 366)]
)
def test_days_accepted(raw: str | None, days: int) -> None:
    assert parse_days(raw) == days


# "²" and "٣" are digits to str.isdigit() (int() refuses the first, reads the second as 3)
@pytest.mark.parametrize("raw", ["0", "367", "-1", "7.5", "seven", " 7", "1e2", "²", "٣", "1²"])
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


def test_epoch_and_the_first_day_redis_serves() -> None:
    new_year = 1_767_225_600  # 2026-01-01T00:00:00Z
    assert epoch_after(None) == 0
    assert epoch_after("2026-01-01") == new_year + DAY
    noon = new_year + 12 * 3600
    retention = 40 * DAY
    assert first_redis_day(noon, 0, retention) == "2025-11-24"  # 38 days back
    assert first_redis_day(noon, new_year + DAY, retention) == "2026-01-02"  # tomorrow


class _Ledger:
    """Redis counters of one account, by day; the epoch key."""

    def __init__(
        self, days: dict[str, UsageCounters], epoch: int | None, groups_epoch: int | None = -1
    ) -> None:
        """``groups_epoch``: -1, the same as ``epoch``."""
        self.days = days
        self.epochs: dict[bool, int | None] = {
            False: epoch,
            True: epoch if groups_epoch == -1 else groups_epoch,
        }

    @property
    def epoch(self) -> int | None:
        return self.epochs[False]

    async def usage_days(self, pid: str, env: str, days: list[str]) -> dict[str, UsageCounters]:
        return {d: self.days.get(d, UsageCounters()) for d in days}

    async def usage_days_by_api(
        self, pid: str, env: str, days: list[str]
    ) -> dict[str, dict[str, UsageCounters]]:
        # a tenth of each day's requests (at least one) came through the Responses API
        by_api = {}
        for day, c in (await self.usage_days(pid, env, days)).items():
            part = UsageCounters(max(1, c.requests // 10), 1, 1, 1) if c.requests else c
            by_api[day] = {"chat": c.minus(part), "responses": part}
        return by_api

    async def usage_days_grouped(
        self, pid: str, env: str, days: list[str], group: str
    ) -> dict[str, dict[str, UsageCounters]]:
        # one request of each day came with the first key (or model), the rest the second
        grouped = {}
        for day, c in (await self.usage_days(pid, env, days)).items():
            if not c.requests:
                grouped[day] = {}
                continue
            first = UsageCounters(1, 1, 1, 1)
            grouped[day] = {f"{group}-a": first, f"{group}-b": c.minus(first)}
        return grouped

    async def usage_epoch(self, *, groups: bool = False) -> int | None:
        return self.epochs[groups]

    async def start_usage_epoch(self, first_day: int, *, groups: bool = False) -> int:
        epoch = self.epochs[groups]
        if epoch is None:
            self.epochs[groups] = epoch = first_day
        return epoch


class _Store:
    def __init__(self, days: dict[str, UsageCounters]) -> None:
        self.days = days

    async def usage_daily(
        self, pid: str, since: str, env: str, *, group_by: str | None = None
    ) -> list[UsageRollup]:
        # every day's usage was chat's, with one key and one model: grouped or not, the
        # same rows
        return [
            _rollup(d, c, group_by)
            for d, c in sorted(self.days.items(), reverse=True)
            if d >= since
        ]

    async def usage_totals(self, pid: str, env: str, before_day: str) -> UsageRollup | None:
        days = [c for d, c in self.days.items() if d < before_day]
        if not days:
            return None
        total = UsageCounters()
        for c in days:
            total = total.plus(c)
        return _rollup("", total)

    async def last_usage_day(self) -> str | None:
        return max(self.days) if self.days else None


def _rollup(day: str, c: UsageCounters, group_by: str | None = None) -> UsageRollup:
    return UsageRollup(
        account_pid="acct_X",
        kid="kid-stored" if group_by == "kid" else "",
        day=day,
        alias="alias-stored" if group_by == "alias" else "",
        environment="live",
        api="chat",
        requests=c.requests,
        prompt_tokens=c.prompt_tokens,
        completion_tokens=c.completion_tokens,
        credits=c.credits,
    )


NOW = 1_767_268_800  # 2026-01-01T12:00:00Z


async def test_recent_days_from_redis_older_from_the_store_never_both() -> None:
    one = UsageCounters(1, 10, 10, 5)
    redis_days = {"2026-01-01": one, "2025-12-31": one}
    # the store has flushed everything: the recent days too, plus an old day
    store_days = {"2026-01-01": one, "2025-12-31": one, "2025-10-01": UsageCounters(2, 1, 1, 7)}
    reader = UsageReader(_Ledger(redis_days, 0), _Store(store_days), retention_s=40 * DAY)  # type: ignore[arg-type]
    summary = await reader.summary("acct_X", "live", NOW, 120)
    assert (summary.requests_count, summary.credits_spent) == (4, 17)  # not 6 / 27
    by_day = {d.day_bucket: d.credits_spent for d in summary.daily}
    assert (by_day["2026-01-01"], by_day["2025-12-31"], by_day["2025-10-01"]) == (5, 5, 7)
    assert len(summary.daily) == 120


async def test_grouped_by_api_the_groups_sum_to_each_day_from_either_source() -> None:
    one = UsageCounters(4, 10, 10, 5)
    redis_days = {"2026-01-01": one}
    store_days = {"2026-01-01": one, "2025-10-01": UsageCounters(2, 1, 1, 7)}
    reader = UsageReader(_Ledger(redis_days, 0), _Store(store_days), retention_s=40 * DAY)  # type: ignore[arg-type]
    plain = await reader.summary("acct_X", "live", NOW, 120)
    grouped = await reader.summary("acct_X", "live", NOW, 120, group_by="api")
    assert msgspec.structs.replace(grouped, daily=[]) == msgspec.structs.replace(plain, daily=[])
    for day, bare in zip(grouped.daily, plain.daily, strict=True):
        assert msgspec.structs.replace(day, groups=msgspec.UNSET) == bare
        assert day.groups is not msgspec.UNSET
        for name in ("requests_count", "credits_spent", "total_tokens"):
            assert sum(getattr(g, name) for g in day.groups) == getattr(day, name)
    by_day = {d.day_bucket: d.groups for d in grouped.daily}
    today = by_day["2026-01-01"]
    assert [(g.api, g.requests_count, g.credits_spent) for g in today] == [  # type: ignore[union-attr]
        ("chat", 3, 4),
        ("responses", 1, 1),
    ]
    # from the store: every day there was chat's
    assert [(g.api, g.requests_count) for g in by_day["2025-10-01"]] == [("chat", 2)]  # type: ignore[union-attr]
    assert by_day["2025-12-01"] == []
    assert "groups" not in msgspec.json.decode(msgspec.json.encode(plain))["daily"][0]


@pytest.mark.parametrize(
    ("group_by", "name", "counted"), [("key", "key_id", "key"), ("model", "model", "model")]
)
async def test_grouped_by_key_or_model_exact_from_either_source(
    group_by: str, name: str, counted: str
) -> None:
    """Groups sum to the day; days before Redis counted groups come from the store."""
    one = UsageCounters(4, 10, 10, 5)
    redis_days = {"2026-01-01": one, "2025-12-31": one}
    store_days = {"2026-01-01": one, "2025-12-31": one, "2025-10-01": UsageCounters(2, 1, 1, 7)}
    # Redis counted keys and models from today on only: yesterday's groups are the store's
    ledger = _Ledger(redis_days, 0, groups_epoch=NOW // DAY * DAY)
    reader = UsageReader(ledger, _Store(store_days), retention_s=40 * DAY)  # type: ignore[arg-type]
    plain = await reader.summary("acct_X", "live", NOW, 120)
    grouped = await reader.summary("acct_X", "live", NOW, 120, group_by=group_by)
    assert msgspec.structs.replace(grouped, daily=[]) == msgspec.structs.replace(plain, daily=[])
    for day, bare in zip(grouped.daily, plain.daily, strict=True):
        assert msgspec.structs.replace(day, groups=msgspec.UNSET) == bare
        assert day.groups is not msgspec.UNSET
        for field in ("requests_count", "credits_spent", "total_tokens"):
            assert sum(getattr(g, field) for g in day.groups) == getattr(day, field)
    by_day = {d.day_bucket: d.groups for d in grouped.daily}
    shown = "key_" if group_by == "key" else ""  # a key as the API names it
    today = [(getattr(g, name), g.requests_count) for g in by_day["2026-01-01"]]  # type: ignore[union-attr]
    assert today == [(f"{shown}{counted}-a", 1), (f"{shown}{counted}-b", 3)]
    column = "kid" if group_by == "key" else "alias"
    for day in ("2025-12-31", "2025-10-01"):
        assert [getattr(g, name) for g in by_day[day]] == [f"{shown}{column}-stored"]  # type: ignore[union-attr]
    encoded = msgspec.json.decode(msgspec.json.encode(grouped))["daily"][0]["groups"][0]
    assert set(encoded) == {name, "requests_count", "credits_spent", "total_tokens"}


def test_group_by_is_checked() -> None:
    assert parse_group_by(None) is None
    assert parse_group_by("") is None
    assert parse_group_by("api") == "api"
    assert parse_group_by("key") == "key"
    assert parse_group_by("model") == "model"
    with pytest.raises(ApiError) as bad:
        parse_group_by("apis")
    assert bad.value.param == "group_by"


async def test_after_redis_lost_its_data_flushed_history_is_still_whole() -> None:
    one = UsageCounters(1, 10, 10, 5)
    store_days = {"2026-01-01": one, "2025-12-30": one}  # flushed before the loss
    ledger = _Ledger({"2026-01-01": UsageCounters(1, 1, 1, 1)}, None)  # Redis came back empty
    reader = UsageReader(ledger, _Store(store_days), retention_s=40 * DAY)  # type: ignore[arg-type]
    summary = await reader.summary("acct_X", "live", NOW, 7)
    assert ledger.epoch == 1_767_225_600 + DAY  # the day after the last flushed day
    assert (summary.requests_count, summary.credits_spent) == (2, 10)
    assert [d.credits_spent for d in summary.daily[:3]] == [5, 0, 5]
