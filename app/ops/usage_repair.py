"""``rebuild-redis --force``'s correction of a kept account's usage counters (all-time and
per day) that are not its ledger's: after Redis went back in time (restarted from an older
AOF or backup, or a failover that lost writes), the settles it lost that the flusher had
already moved into the durable rollups are missing from its counters (their credits from
its pools too: ``app.ops.recompute`` corrects those).

A settle adds to the counters and appends its event to the stream in one script call, and
a flush moves events from the stream into the rollups, so the difference measured on one
consistent read (``consistent_shards``) stays what it is while settles and flushes go on;
it is added to the counters with ``HINCRBY``, which commutes with the settles' own."""

from __future__ import annotations

from app.core.clock import day_tag
from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from app.ops.reconcile import check_account, complete_usage_days, first_grouped_day
from app.ops.shard_state import consistent_shards
from app.store import Store


async def correct_usage(
    redis: RedisClient,
    layout: KeySpace,
    store: Store,
    *,
    now: float,
    earned_ttl_s: int,
    usage_retention_s: int,
) -> int:
    """Move every kept account's drifting counters to its ledger's: how many accounts."""
    days = await complete_usage_days(redis, layout, store, now=now, retention_s=usage_retention_s)
    grouped_from = await first_grouped_day(redis, layout, store)
    shards, known = await consistent_shards(redis, layout, store, set(), earned_ttl_s, days)
    corrected = 0
    for shard, (state, shard_sums) in sorted(shards.items()):
        for pid, sums in sorted(shard_sums.items()):
            if pid not in known or pid not in state.pools:
                continue  # restored whole by the rebuild, or not svc's
            check = check_account(pid, shard, state, sums, True, grouped_from)
            if not (check.usage_drift or check.day_drift):
                continue
            # one slot per account: the pipeline goes to one node, in one round trip
            pipe = redis.pipeline(transaction=False)
            for name, drift in check.usage_drift.items():
                pipe.hincrby(layout.usage_total(shard, pid), name, -drift)
            for day, drifts in check.day_drift.items():
                for name, drift in drifts.items():
                    pipe.hincrby(layout.usage_day(shard, pid, day_tag(day)), name, -drift)
            await pipe.execute()
            corrected += 1
    return corrected
