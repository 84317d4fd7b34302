"""A batch of the events stream's entries as the rows the flusher writes in one transaction
(``app.usage.flusher``): the usage rollups, the expiries, a request's activity row, the
events webhooks are told of. Pure functions of the events: a replayed batch gives the same
rows (each keyed by its shard and stream id, so the store writes it once)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.kv.stream_events import (
    CapEvent,
    ExpiryEvent,
    LowBalanceEvent,
    StreamEvent,
    UsageEvent,
    parse_event,
)
from app.store import (
    ActivityRecord,
    CreditExpiry,
    UsageBatch,
    UsageRollup,
    WebhookEventRecord,
)
from app.usage.upstream_costs import upstream_costs
from app.webhooks.events import cap_threshold, credits_low, earned_expired


def parsed(entries: Any) -> list[StreamEvent]:
    """XRANGE's reply as the events it holds."""
    return [parse_event(entry_id, fields) for entry_id, fields in entries or []]


def usage_batch(shard: int, events: Sequence[StreamEvent], after: str | None) -> UsageBatch:
    """The shard's events (read after the cursor ``after``) as the batch the store applies."""
    return UsageBatch(
        shard=shard,
        last_stream_id=events[-1].id,
        rollups=aggregate(events),
        after=after,
        expiries=expiries(shard, events),
        activity=activity(shard, events),
        webhook_events=notices(shard, events),
        costs=upstream_costs(events),
    )


def aggregate(events: Sequence[StreamEvent]) -> list[UsageRollup]:
    """Sum the usage events per (account, key, day, alias, environment, API), in
    first-seen order; expiry events are not usage and are left out."""
    sums: dict[tuple[str, str, str, str, str, str], list[int]] = {}
    for e in events:
        if not isinstance(e, UsageEvent):
            continue
        key = (e.account_pid, e.kid, e.day, e.alias, e.environment, e.api)
        acc = sums.setdefault(key, [0, 0, 0, 0, 0])
        acc[0] += 1
        acc[1] += e.prompt_tokens
        acc[2] += e.completion_tokens
        acc[3] += e.credits
        acc[4] += e.earned_credits
    return [
        UsageRollup(
            account_pid=pid,
            kid=kid,
            day=day,
            alias=alias,
            environment=env,
            api=api,
            requests=n,
            prompt_tokens=pt,
            completion_tokens=ct,
            credits=cr,
            earned_credits=ec,
        )
        for (pid, kid, day, alias, env, api), (n, pt, ct, cr, ec) in sums.items()
    ]


def expiries(shard: int, events: Sequence[StreamEvent]) -> list[CreditExpiry]:
    """The expiry events as durable rows, each keyed by its shard and stream id."""
    return [
        CreditExpiry(
            expiry_id=f"{shard}:{e.id}",
            account_pid=e.account_pid,
            credits=e.credits,
            expired_at=e.ts,
        )
        for e in events
        if isinstance(e, ExpiryEvent)
    ]


def activity_row(shard: int, e: UsageEvent) -> ActivityRecord:
    """A usage event as its activity row, keyed by its shard and stream id. A request whose
    response id is unknown (swept: its worker stopped before settling) is named by its
    reservation; one whose start is unknown (an event from before the field) by its settle
    time. Its failovers are not known when nothing served is (swept: its worker stopped
    before it could tell), nor the prices it was settled at."""
    prices = e.served.prices
    return ActivityRecord(
        event_key=f"{shard}:{e.id}",
        account_pid=e.account_pid,
        environment=e.environment,
        created=e.served.created or e.ts,
        id=e.served.response_id or e.reservation_id,
        kid=e.kid,
        requested_model=e.requested or e.alias,
        model=e.alias,
        api=e.api,
        prompt_tokens=e.prompt_tokens,
        completion_tokens=e.completion_tokens,
        credits_used=e.credits,
        outcome=e.outcome,
        ttfb_ms=e.served.ttfb_ms,
        duration_ms=e.served.duration_ms,
        usage_source=e.served.usage_source,
        earned_credits=e.earned_credits,
        cached_tokens=e.cached_tokens,
        cache_write_tokens=e.cache_write_tokens,
        reasoning_tokens=e.reasoning_tokens,
        failovers=e.failovers if e.served.response_id else None,
        input_price=None if prices is None else prices.input,
        cached_input_price=None if prices is None else prices.cached_input,
        cache_write_price=None if prices is None else prices.cache_write,
        output_price=None if prices is None else prices.output,
        provider=e.served.provider or None,
        upstream_model=e.served.upstream_model if e.served.provider else None,
        cost_currency=e.served.cost_currency or None,
        upstream_cost_micros=e.served.upstream_cost if e.served.cost_currency else None,
    )


def activity(shard: int, events: Sequence[StreamEvent]) -> list[ActivityRecord]:
    """The usage events as activity rows (``activity_row``)."""
    return [activity_row(shard, e) for e in events if isinstance(e, UsageEvent)]


def notices(shard: int, events: Sequence[StreamEvent]) -> list[WebhookEventRecord]:
    """The events webhooks are told of: expiries (``credits.earned_expired``), a balance
    fallen below its threshold (``credits.low``), a cap threshold crossed."""
    told = []
    for e in events:
        if isinstance(e, UsageEvent):
            continue  # nearly every event: its key is not made for nothing
        at = f"{shard}:{e.id}"
        if isinstance(e, ExpiryEvent):
            told.append(earned_expired(e.account_pid, at, e.credits, e.ts))
        elif isinstance(e, LowBalanceEvent):
            told.append(credits_low(e.account_pid, at, e.balance, e.low, e.ts))
        elif isinstance(e, CapEvent):
            told.append(
                cap_threshold(e.account_pid, e.kid, e.counter, e.level, e.cap, e.spent, e.ts)
            )
    return told
