"""Receipts (``GET /v1/activity/{id}``): one settled request in full, by its response's id,
from the moment its stream has ended.

The durable activity row is read first (``Store.get_activity``: one lookup of the
``activity_ids`` index). A request the flusher has not written yet is still an entry of
its account's shard's usage stream: what settle appended and no flusher has trimmed, the
shard's backlog (a second's worth in steady state). It is read newest first, since a
request that has just ended is at the stream's end, a page at a time and at most
``SCAN_LIMIT`` entries deep; nothing is written on the hot path for it. When the stream has
no such entry, the store is read once more: a flusher that wrote the row and trimmed the
entry between the two reads leaves it there. Only the owning account sees a receipt; a
key sees its own environment's (activity is per environment), as ``GET /v1/activity``.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from app.core.errors import ApiError, ErrorKind
from app.keys.format import public_id
from app.kv.client import RedisClient
from app.kv.layout import KeySpace, as_text
from app.kv.stream_events import EventField, UsageEvent, parse_event
from app.store import ActivityRecord, Store
from app.usage.batch_rows import activity_row

ID_PREFIXES = ("chatcmpl-svc-", "resp_svc_", "msg_svc_", "rsv_")
"""What an activity id starts with: a chat completion's, a response's, a message's (the
Messages API's), or (swept) a reservation's."""
MAX_ID_CHARS = 128  # longer than any of them
_ID_CHARS = frozenset(string.ascii_letters + string.digits + "_-")
SCAN_PAGE = 100
"""Stream entries read per round trip, newest first."""
SCAN_LIMIT = 1000
"""Entries of a shard's backlog read at most: a request settled further back than this in
a backlog the flushers have not drained (they are down, or far behind) is not found until
they have written its row."""


class ReceiptPrices(msgspec.Struct, frozen=True):
    """The prices a request was settled at, credits per 1,000 tokens (``GET /v1/pricing``'s
    four, as they were then)."""

    input: int  # uncached prompt tokens
    cached_input: int  # prompt tokens read from the upstream's cache
    cache_write: int  # prompt tokens written to it (reported apart)
    output: int  # completion tokens, reasoning included


def receipt_prices(row: ActivityRecord) -> ReceiptPrices | None:
    """``row``'s prices; None when they are not known (a swept request, a row written
    before svc kept them)."""
    if (
        row.input_price is None
        or row.cached_input_price is None
        or row.cache_write_price is None
        or row.output_price is None
    ):
        return None
    return ReceiptPrices(
        row.input_price, row.cached_input_price, row.cache_write_price, row.output_price
    )


class Receipt(msgspec.Struct, kw_only=True):
    """One settled request: its activity row (``ActivityItem``), with its environment, its
    total tokens, and which pool its credits came from."""

    id: str  # chatcmpl-svc-… / resp_svc_… / msg_svc_…; rsv_… when swept after its worker died
    object: Literal["request.receipt"] = "request.receipt"
    created: int  # unix seconds the request started
    key_id: str
    environment: str  # live | test
    api: str  # chat | responses | messages
    requested_model: str
    model: str  # the model that served it
    outcome: str  # completed | client_disconnect | upstream_error | shutdown | swept
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    # the parts of prompt_tokens read from the upstream's cache and written to it, and of
    # completion_tokens spent reasoning, as the upstream reported them (0: none); None:
    # not known (a row written before svc kept them)
    cached_tokens: int | None
    cache_write_tokens: int | None
    reasoning_tokens: int | None
    usage_source: str  # upstream (the provider's count) | estimated (svc's own)
    credits_used: int
    # the prices credits_used was worked out at, whatever the model costs now; None: not
    # known (a swept request, or a row written before svc kept them)
    prices: ReceiptPrices | None
    # the parts of credits_used taken from each pool (they sum to it); None: nothing was
    # taken (a test key), or not known (a row written before svc kept the split)
    earned_credits: int | None
    purchased_credits: int | None
    # the upstreams that failed before their first output, each followed by the next
    # candidate, before the one that served (0: the first served); None: not known (a
    # swept request, or a row written before svc kept it)
    failovers: int | None
    ttfb_ms: int  # from the request's arrival to its first output
    duration_ms: int  # from the request's arrival to its settlement


def receipt(row: ActivityRecord) -> Receipt:
    """``row`` as its receipt."""
    earned = row.earned_credits if row.environment == "live" else None
    return Receipt(
        id=row.id,
        created=row.created,
        key_id=public_id(row.kid),
        environment=row.environment,
        api=row.api,
        requested_model=row.requested_model,
        model=row.model,
        outcome=row.outcome,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        total_tokens=row.prompt_tokens + row.completion_tokens,
        cached_tokens=row.cached_tokens,
        cache_write_tokens=row.cache_write_tokens,
        reasoning_tokens=row.reasoning_tokens,
        usage_source=row.usage_source,
        credits_used=row.credits_used,
        prices=receipt_prices(row),
        earned_credits=earned,
        purchased_credits=None if earned is None else row.credits_used - earned,
        failovers=row.failovers,
        ttfb_ms=row.ttfb_ms,
        duration_ms=row.duration_ms,
    )


class UpstreamCharge(msgspec.Struct, frozen=True, kw_only=True):
    """What served a request and what it cost svc: for operators only, never in an answer
    an account's own keys can read."""

    provider: str  # the provider's name in the models file
    model: str  # its real model name
    currency: str | None  # of cost_micros; None: the models file names no cost for it
    cost_micros: int | None  # micro-units of currency (docs/operations.md, "The books")
    cost_source: str  # upstream (the provider's usage report) | estimated (svc's count)


class OperatorReceipt(Receipt, kw_only=True):
    """A receipt as an operator reads it (``GET /admin/v1/accounts/{pid}/activity/{id}``):
    with the upstream that served it and its cost (None: not known, a swept request or a
    row written before svc kept them)."""

    upstream: UpstreamCharge | None


def operator_receipt(row: ActivityRecord) -> OperatorReceipt:
    """``row`` as an operator's receipt."""
    upstream = None
    if row.provider is not None:
        upstream = UpstreamCharge(
            provider=row.provider,
            model=row.upstream_model or "",
            currency=row.cost_currency,
            cost_micros=row.upstream_cost_micros,
            cost_source=row.usage_source,
        )
    fields = msgspec.structs.asdict(receipt(row))
    return OperatorReceipt(**fields, upstream=upstream)


def activity_not_found(activity_id: str) -> ApiError:
    return ApiError(
        ErrorKind.ACTIVITY_NOT_FOUND,
        f"No request '{activity_id[:MAX_ID_CHARS]}' in this account's activity.",
        param="activity_id",
    )


def is_activity_id(text: str) -> bool:
    """Whether ``text`` has the form of an id svc gives a request (``ID_PREFIXES``)."""
    return len(text) <= MAX_ID_CHARS and text.startswith(ID_PREFIXES) and _ID_CHARS.issuperset(text)


def _field(fields: Mapping[Any, Any], name: str) -> bytes:
    """A stream entry's field as bytes (b"" when absent), whether the client decodes
    replies or not."""
    value = fields.get(name.encode())
    if value is None:
        value = fields.get(name)
    if value is None:
        return b""
    return value if isinstance(value, bytes) else str(value).encode()


def names(fields: Mapping[Any, Any], activity_id: bytes) -> bool:
    """Whether a stream entry is the usage event of the request ``activity_id`` names, by
    the rule of ``activity_row``: its response's id, else (swept) its reservation's."""
    if _field(fields, EventField.KIND):
        return False  # not a usage event
    served = _field(fields, EventField.SERVED)
    if served:
        return served.startswith(activity_id + b" ")
    return _field(fields, EventField.RESERVATION) == activity_id


class Receipts:
    """Receipts from the durable store, and from the usage streams until the flusher has
    written them there."""

    def __init__(
        self,
        store: Store,
        redis: RedisClient,
        layout: KeySpace,
        *,
        scan_page: int = SCAN_PAGE,
        scan_limit: int = SCAN_LIMIT,
    ) -> None:
        self.store = store
        self.redis = redis
        self.layout = layout
        self.scan_page = scan_page
        self.scan_limit = scan_limit

    async def find(self, pid: str, activity_id: str, environment: str | None) -> Receipt:
        """The receipt of ``pid``'s request ``activity_id`` (in ``environment``; None: in
        either); 404 ``activity_not_found`` when the account has none."""
        row = await self.row(pid, activity_id)
        if row is None or (environment is not None and row.environment != environment):
            raise activity_not_found(activity_id)
        return receipt(row)

    async def find_for_operator(self, pid: str, activity_id: str) -> OperatorReceipt:
        """``find`` in either environment, with what served the request and its cost."""
        row = await self.row(pid, activity_id)
        if row is None:
            raise activity_not_found(activity_id)
        return operator_receipt(row)

    async def row(self, pid: str, activity_id: str) -> ActivityRecord | None:
        """``pid``'s activity row ``activity_id``: durable, else still in the stream."""
        if not is_activity_id(activity_id):
            return None
        row = await self.store.get_activity(pid, activity_id)
        if row is not None:
            return row
        row = await self.pending(pid, activity_id)
        if row is not None:
            return row
        return await self.store.get_activity(pid, activity_id)

    async def pending(self, pid: str, activity_id: str) -> ActivityRecord | None:
        """The row the flusher will write for ``pid``'s request ``activity_id``, from the
        entries of the account's shard's stream, newest first (``SCAN_LIMIT`` at most)."""
        shard = self.layout.shard(pid)
        stream = self.layout.events(shard)
        wanted = activity_id.encode()
        newest = "+"
        read = 0
        while read < self.scan_limit:
            count = min(self.scan_page, self.scan_limit - read)
            entries: list[Any] = await self.redis.xrevrange(stream, newest, "-", count=count) or []
            for entry_id, fields in entries:
                if names(fields, wanted):
                    event = parse_event(entry_id, fields)
                    if not isinstance(event, UsageEvent) or event.account_pid != pid:
                        return None  # ids are unique: another account's request
                    return activity_row(shard, event)
            if len(entries) < count:
                return None  # the stream's oldest entry was read
            read += count
            newest = f"({as_text(entries[-1][0])}"
        return None
