"""Request activity (``GET /v1/activity``): an account's settled requests, newest first,
a page at a time, as JSON or CSV.

The rows are written by the flusher from the settle events (``batch_rows.activity``), so
listing them costs the hot path nothing; a page is one range scan of an index of the
store (``statements.activity_page``). ``after`` is the ``id`` of the last row of the
previous page, as in OpenAI's lists.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Literal

import msgspec

from app.core.clock import DAY_S, day_start
from app.core.errors import invalid_value
from app.core.validation import query_int
from app.keys.format import ENVIRONMENTS, kid_from_public_id, public_id
from app.store import ActivityQuery, ActivityRecord, Store

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
MAX_ID_CHARS = 256  # longer than any id svc makes or alias it serves
CSV_PAGE = MAX_LIMIT  # rows read per statement while a CSV export streams


class ActivityItem(msgspec.Struct, kw_only=True):
    """One settled request, as the client saw it in its metadata chunk and more."""

    id: str  # chatcmpl-svc-… / resp_svc_… / msg_svc_…; rsv_… when swept after its worker died
    object: Literal["request.activity"] = "request.activity"
    created: int  # unix seconds the request started
    key_id: str
    requested_model: str
    model: str  # the model that served it
    api: str  # chat | responses | messages
    prompt_tokens: int
    completion_tokens: int
    credits_used: int
    outcome: str  # completed | client_disconnect | upstream_error | shutdown | swept
    ttfb_ms: int  # from the request's arrival to its first output
    duration_ms: int  # from the request's arrival to its settlement
    usage_source: str  # upstream (the provider's count) | estimated (svc's own)


class ActivityPage(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[ActivityItem]
    first_id: str | None
    last_id: str | None
    has_more: bool


class ActivityFilter(msgspec.Struct, frozen=True, kw_only=True):
    """What a client asked for (the query parameters), checked."""

    limit: int | None  # None: every row (a CSV export without a limit)
    after: str | None = None
    kid: str | None = None
    model: str | None = None
    since: int | None = None
    until: int | None = None


def item(row: ActivityRecord) -> ActivityItem:
    return ActivityItem(
        id=row.id,
        created=row.created,
        key_id=public_id(row.kid),
        requested_model=row.requested_model,
        model=row.model,
        api=row.api,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        credits_used=row.credits_used,
        outcome=row.outcome,
        ttfb_ms=row.ttfb_ms,
        duration_ms=row.duration_ms,
        usage_source=row.usage_source,
    )


def _limit(raw: str | None, *, csv_export: bool) -> int | None:
    if csv_export and not raw:
        return None  # every row
    return query_int(raw, "limit", low=1, high=MAX_LIMIT, default=DEFAULT_LIMIT)


def _text(params: Mapping[str, str], name: str) -> str | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > MAX_ID_CHARS or not raw.isprintable():
        raise invalid_value(name, f"'{name}' is not a valid value.")
    return raw


def parse_filter(params: Mapping[str, str], *, csv_export: bool = False) -> ActivityFilter:
    """The query parameters ``limit`` (1-500; default 100, a CSV export every row),
    ``after``, ``key_id``, ``model`` and ``day`` (``YYYY-MM-DD``, UTC)."""
    key_id = _text(params, "key_id")
    kid = None
    if key_id is not None:
        kid = kid_from_public_id(key_id)
        if kid is None:
            raise invalid_value("key_id", "'key_id' must be an API key id (key_…).")
    since = until = None
    day = params.get("day")
    if day:
        since = day_start(day)
        if since is None:
            raise invalid_value("day", "'day' must be a date, YYYY-MM-DD.")
        until = since + DAY_S
    return ActivityFilter(
        limit=_limit(params.get("limit"), csv_export=csv_export),
        after=_text(params, "after"),
        kid=kid,
        model=_text(params, "model"),
        since=since,
        until=until,
    )


def parse_environment(raw: str | None) -> str:
    """The ``environment`` an operator asks for: live (the default) or test."""
    if raw is None or raw == "":
        return "live"
    if raw not in ENVIRONMENTS:
        raise invalid_value("environment", "'environment' must be live or test.")
    return raw


class ActivityReader:
    """Pages of an account's activity from the durable store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def query(self, pid: str, environment: str, wanted: ActivityFilter) -> ActivityQuery:
        """The store's query for ``wanted`` (``after`` found: 400 when it names no row)."""
        after = None
        if wanted.after is not None:
            after = await self.store.activity_position(pid, wanted.after)
            if after is None:
                raise invalid_value("after", "'after' must be the id of a row of this list.")
        return ActivityQuery(
            account_pid=pid,
            environment=environment,
            limit=wanted.limit or MAX_LIMIT,
            kid=wanted.kid,
            model=wanted.model,
            since=wanted.since,
            until=wanted.until,
            after=after,
        )

    async def page(self, pid: str, environment: str, wanted: ActivityFilter) -> ActivityPage:
        """One page, newest first; ``has_more`` when rows follow it."""
        query = await self.query(pid, environment, wanted)
        limit = query.limit
        rows = await self.store.list_activity(msgspec.structs.replace(query, limit=limit + 1))
        data = [item(r) for r in rows[:limit]]
        return ActivityPage(
            data=data,
            first_id=data[0].id if data else None,
            last_id=data[-1].id if data else None,
            has_more=len(rows) > limit,
        )

    async def rows(self, query: ActivityQuery, limit: int | None) -> AsyncIterator[ActivityRecord]:
        """Every row ``query`` names (up to ``limit``; None: all), read ``CSV_PAGE`` at a
        time (each read is a page: one index range scan)."""
        left = limit
        while left is None or left > 0:
            size = CSV_PAGE if left is None else min(CSV_PAGE, left)
            batch = await self.store.list_activity(msgspec.structs.replace(query, limit=size))
            for row in batch:
                yield row
            if len(batch) < size:
                return
            if left is not None:
                left -= len(batch)
            query = msgspec.structs.replace(query, after=(batch[-1].created, batch[-1].event_key))
