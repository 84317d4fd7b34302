"""The usage counters settle writes (per account and UTC day, per API, per key and model),
read back for ``GET /v1/usage``, and the usage epochs: from which day this Redis holds them
whole."""

from __future__ import annotations

from app.core.clock import day_tag
from app.credits.scripts import Scripts
from app.kv.fields import API_CHAT, APIS, COUNTERS, UsageCounters, group_counters, usage_field
from app.kv.layout import KeySpace, as_text


class UsageCounts:
    """Reads of the usage counters, over the connections of ``scripts``."""

    def __init__(self, scripts: Scripts, layout: KeySpace) -> None:
        self.redis = scripts.redis
        self.layout = layout

    async def usage_days(
        self, pid: str, environment: str, days: list[str]
    ) -> dict[str, UsageCounters]:
        """The usage counters of an account for each day (``YYYY-MM-DD``), one round trip."""
        shard = self.layout.shard(pid)
        fields = [usage_field(environment, name) for name in COUNTERS]
        pipe = self.redis.pipeline(transaction=False)
        for day in days:
            pipe.hmget(self.layout.usage_day(shard, pid, day_tag(day)), fields)
        rows = await pipe.execute()
        return {
            day: UsageCounters(*(int(v or 0) for v in row))
            for day, row in zip(days, rows, strict=True)
        }

    async def usage_days_by_api(
        self, pid: str, environment: str, days: list[str]
    ) -> dict[str, dict[str, UsageCounters]]:
        """The usage counters of an account for each day, per API (every one of ``APIS``;
        chat's are the day's less the other APIs'), one round trip."""
        shard = self.layout.shard(pid)
        fields = [usage_field(environment, name, api) for api in APIS for name in COUNTERS]
        pipe = self.redis.pipeline(transaction=False)
        for day in days:
            pipe.hmget(self.layout.usage_day(shard, pid, day_tag(day)), fields)
        rows = await pipe.execute()
        width = len(COUNTERS)
        by_day: dict[str, dict[str, UsageCounters]] = {}
        for day, row in zip(days, rows, strict=True):
            values = [int(v or 0) for v in row]
            per_api = {
                api: UsageCounters(*values[i * width : (i + 1) * width])
                for i, api in enumerate(APIS)
            }
            # the first fields are the day's (chat's name): chat's part is what is left
            chat = per_api[API_CHAT]
            for api in APIS[1:]:
                chat = chat.minus(per_api[api])
            per_api[API_CHAT] = chat
            by_day[day] = per_api
        return by_day

    async def usage_days_grouped(
        self, pid: str, environment: str, days: list[str], group: str
    ) -> dict[str, dict[str, UsageCounters]]:
        """The usage counters of an account for each day, per value of ``group`` (one of
        ``GROUPS``: per key, or per model served) that served requests, one round trip."""
        shard = self.layout.shard(pid)
        pipe = self.redis.pipeline(transaction=False)
        for day in days:
            pipe.hgetall(self.layout.usage_day(shard, pid, day_tag(day)))
        rows = await pipe.execute()
        return {
            day: group_counters({as_text(k): int(v) for k, v in row.items()}, environment, group)
            for day, row in zip(days, rows, strict=True)
        }

    async def usage_epoch(self, *, groups: bool = False) -> int | None:
        """The first day (unix seconds at its 00:00 UTC) this Redis holds complete usage
        counters for (``groups``: per-key and per-model counters too); None when it was
        never set (a new or emptied Redis)."""
        raw = await self.redis.get(self._epoch_key(groups))
        return None if raw is None else int(raw)

    async def start_usage_epoch(self, first_day: int, *, groups: bool = False) -> int:
        """Set the epoch unless set already; returns the epoch in force."""
        key = self._epoch_key(groups)
        await self.redis.set(key, first_day, nx=True)
        return int(await self.redis.get(key) or first_day)

    def _epoch_key(self, groups: bool) -> str:
        return self.layout.group_usage_epoch() if groups else self.layout.usage_epoch()
