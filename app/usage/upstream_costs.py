"""What a batch of settled requests cost upstream, per day, alias, provider's model,
currency and environment: the rollups the books read (``app.store.books``), written by the
flusher in the transaction of the usage rollups, so both are the sums of the same requests."""

from __future__ import annotations

from collections.abc import Sequence

from app.kv.fields import USAGE_ESTIMATED
from app.kv.stream_events import StreamEvent, UsageEvent
from app.store import UpstreamCostRollup

_SUMS = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "completion_tokens",
    "credits",
    "cost_micros",
    "estimated_requests",
    "estimated_cost_micros",
)


def upstream_costs(events: Sequence[StreamEvent]) -> list[UpstreamCostRollup]:
    """Sum the usage events per (day, alias, provider, upstream model, currency,
    environment), in first-seen order; the other events are left out."""
    sums: dict[tuple[str, str, str, str, str, str], list[int]] = {}
    for e in events:
        if not isinstance(e, UsageEvent):
            continue
        served = e.served
        key = (e.day, e.alias, served.provider, served.upstream_model, served.cost_currency)
        acc = sums.setdefault((*key, e.environment), [0] * len(_SUMS))
        # in _SUMS order, added one by one: a loop over a tuple of them cost the flusher
        # twice as much per event
        acc[0] += 1
        acc[1] += e.prompt_tokens
        acc[2] += e.cached_tokens
        acc[3] += e.cache_write_tokens
        acc[4] += e.completion_tokens
        acc[5] += e.credits
        acc[6] += served.upstream_cost
        if served.usage_source == USAGE_ESTIMATED:
            acc[7] += 1
            acc[8] += served.upstream_cost
    return [
        UpstreamCostRollup(
            day=day,
            alias=alias,
            provider=provider,
            upstream_model=model,
            currency=currency,
            environment=environment,
            **dict(zip(_SUMS, values, strict=True)),
        )
        for (day, alias, provider, model, currency, environment), values in sums.items()
    ]
