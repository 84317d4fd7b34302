"""One shard's batch of usage events as the store applies it (``Store.apply_usage`` and
``Store.apply_usage_batches``): the rows the flusher built and the cursor it moves."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from app.store.books import UpstreamCostRollup
from app.store.records import ActivityRecord, CreditExpiry, UsageRollup, WebhookEventRecord

ANY_CURSOR = "*"
"""``after``'s default: apply whatever the cursor is (never a stream id)."""


class UsageBatch(msgspec.Struct, frozen=True, kw_only=True):
    """The shard's events up to ``last_stream_id``, read after the cursor ``after``, as
    rows."""

    shard: int
    last_stream_id: str
    rollups: Sequence[UsageRollup] = ()
    after: str | None = ANY_CURSOR
    expiries: Sequence[CreditExpiry] = ()
    activity: Sequence[ActivityRecord] = ()
    webhook_events: Sequence[WebhookEventRecord] = ()
    costs: Sequence[UpstreamCostRollup] = ()
