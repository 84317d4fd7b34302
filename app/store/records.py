"""Rows of the durable store, as typed records.

Field names are the column names: the SQL in ``app.store.statements`` is built from them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar

import msgspec

R = TypeVar("R", bound=msgspec.Struct)
Row = tuple[Any, ...]


class AccountRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An account; balances live in Redis, the grants that fund them in ``credit_grants``."""

    pid: str  # public id "acct_…"
    created_at: int  # unix seconds
    status: str = "active"  # "active" | "disabled" (its keys are refused)
    low_balance_credits: int | None = None  # webhooks' credits.low threshold; None: none
    external_id: str | None = None  # the app's own id of it (app.accounts.external); None: none


class AccountQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Which accounts to list: newest first, after a position; with any of ``pid``, ``kid``
    and ``last4``, only the accounts that have that id, or a key of that id or whose last
    four characters those are."""

    limit: int
    pid: str | None = None
    kid: str | None = None
    last4: str | None = None
    external_id: str | None = None  # only the account with this external id (with the above)
    after: tuple[int, str] | None = None  # (created_at, pid) of the account the page follows


class KeyRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An API key. Only an argon2id hash of the secret is kept, never the secret."""

    kid: str  # 12-char key id; the public API id is "key_" + kid
    account_pid: str
    name: str
    environment: str  # "live" | "test"
    daily_cap_credits: int | None  # None = no cap
    secret_hash: str  # argon2id encoded hash of the full key secret
    last4: str
    created_at: int
    status: str = "active"  # "active" | "revoked"
    revoked_at: int | None = None
    expires_at: int | None = None  # unix seconds from which the key is expired; None: never
    allowed_models: str | None = None  # aliases it may use, space-separated; None: all
    rate_limit_rpm: int | None = None  # requests it may start in any 60 seconds; None: no limit
    max_credits_per_request: int | None = None  # the most one request may cost; None: no ceiling
    lineage: str | None = None  # kid of the first key of its rotations; None: its own
    replaces: str | None = None  # kid of the key it was rotated from
    role: str = "admin"  # "admin" (manages keys and webhooks) | "inference" (app.keys.roles)

    @property
    def cap_kid(self) -> str:
        """The kid its daily cap counter and rate limit are kept under: shared by every key
        of a rotation lineage, so rotating never resets or doubles them."""
        return self.lineage or self.kid


class KeyRotation(StrEnum):
    """What a rotation (``Store.rotate_key``) did."""

    ROTATED = "rotated"  # the new key is written; the old one expires at the end of its grace
    NOT_ACTIVE = "not_active"  # the old key is revoked, expired or not the account's
    ROTATED_BEFORE = "rotated_before"  # the old key has a successor already
    LIMIT_REACHED = "limit_reached"  # the old key's grace would take the account past its limit


class GrantRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of the credit ledger (``app.accounts.ledger``): credits into an account's
    pools (a purchase, a reward, an operator's grant) or out of them (a refund, a dispute,
    an operator's debit). Written before Redis changes; ``applied_at`` is set once Redis
    applied it. ``credits - debt_change`` is what the entry asked, always: the pools moved
    by ``credits`` and the debt by ``debt_change`` (a grant that paid a debt, a take-back
    that found the pools short); a pending entry holds what it asks in ``credits``."""

    grant_id: str  # the entry's id, unique: its idempotency (Redis's marker of it too)
    account_pid: str
    pool: str  # "purchased" | "earned": the pool it is for
    credits: int  # signed: > 0 into the pools, < 0 out of them
    source: str  # who: "operator", "stripe", "admob", "signed", "dev"; rows of before:
    # "admin", "spotlight" (app.accounts.ledger reads them as the new names)
    reference: str | None  # the source's own id of it: a view id, a payment, a session
    created_at: int
    expires_at: int | None = None
    reason: str | None = None  # the operator's (None: none given)
    kind: str = "grant"  # purchase | reward | grant | refund | dispute | dispute_won | debit
    # | refund_reversed
    debt_change: int = 0  # signed: > 0 the entry left a debt, < 0 it paid one
    applied_at: int | None = None  # when Redis applied it; None: pending
    intent: str | None = None  # a reward's spotlight intent, consumed with it
    seq: int = 0  # orders the entries of one second (``app.store.audit.new_seq``)


class UsageRollup(msgspec.Struct, frozen=True, kw_only=True):
    """Usage of one key on one UTC day through one alias and one API; sums leave what they
    sum over empty (kid, alias, api, day)."""

    account_pid: str
    kid: str
    day: str  # "YYYY-MM-DD"
    alias: str  # the alias that served
    environment: str
    api: str  # "chat" | "responses" (app.kv.fields.APIS)
    requests: int
    prompt_tokens: int
    completion_tokens: int
    credits: int
    earned_credits: int = 0  # the part of credits paid from the earned pool (live only)


class CreditExpiry(msgspec.Struct, frozen=True, kw_only=True):
    """Earned credits that lapsed when an account's earned pool expired (a script zeroed
    it and wrote an expiry event; the flusher made it durable)."""

    expiry_id: str  # "<shard>:<stream id>": stable, so a replayed batch writes it once
    account_pid: str
    credits: int
    expired_at: int  # unix seconds


class ActivityRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One settled request (``GET /v1/activity``), as the flusher wrote it from its usage
    event."""

    event_key: str  # "<shard>:<stream id>": stable, so a replayed batch writes it once
    account_pid: str
    environment: str
    created: int  # unix seconds the request started
    id: str  # the response's id (chatcmpl-svc-…, resp_svc_…); its reservation's when swept
    kid: str
    requested_model: str
    model: str  # the alias that served
    api: str
    prompt_tokens: int
    completion_tokens: int
    credits_used: int
    outcome: str
    ttfb_ms: int
    duration_ms: int
    usage_source: str  # "upstream" | "estimated"
    # the part of credits_used taken from the earned pool (the usage event's); None: not
    # known (a row written before svc kept it)
    earned_credits: int | None = None
    # the parts of prompt_tokens the upstream read from its cache and wrote to it, and of
    # completion_tokens spent reasoning (0: none reported); None: a row written before
    # svc kept them
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    # the upstreams that failed before their first piece, each followed by the next
    # candidate, before the one that served (0: the first served); None: not known (a
    # swept request, or a row written before svc kept it)
    failovers: int | None = None
    # the prices it was settled at, credits per 1,000 tokens (the usage event's); None: not
    # known (a swept request, or a row written before svc kept them)
    input_price: int | None = None
    cached_input_price: int | None = None
    cache_write_price: int | None = None
    output_price: int | None = None
    # (operators only, never an account's) the upstream that served, and what it cost in
    # micro-units of cost_currency; None: not known (its cost: not in the models file)
    provider: str | None = None
    upstream_model: str | None = None
    cost_currency: str | None = None
    upstream_cost_micros: int | None = None


class ActivityQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Which of an account's activity rows to list: newest first, after a position."""

    account_pid: str
    environment: str
    limit: int
    kid: str | None = None
    model: str | None = None
    since: int | None = None  # created at or after (unix seconds)
    until: int | None = None  # created before
    after: tuple[int, str] | None = None  # (created, event_key) of the row the page follows


class WebhookRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A receiver of an account's events. Its signing secret is not kept: it is derived
    from the key pepper and ``secret_salt`` (``app.webhooks.signing``)."""

    id: str  # "wh_…"
    account_pid: str
    url: str
    events: str  # the event types it receives, space-separated
    description: str
    secret_salt: str
    created_at: int
    deleted_at: int | None = None


class WebhookEventRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An event of an account, to deliver to each of its webhooks that receives its type."""

    event_id: str  # "evt_…": stable for one occurrence, so a retried write adds it once
    account_pid: str
    type: str
    created: int
    data: str  # the event's ``data``, JSON


class DeliveryRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One event on its way to one webhook: the state of its delivery."""

    event_id: str
    webhook_id: str
    account_pid: str
    type: str
    created: int
    data: str
    status: str  # "pending" | "delivered" | "failed" (given up after the retry window)
    attempt: int  # attempts made
    status_code: int | None  # the receiver's answer to the last attempt; None: none came
    error: str | None  # why the last attempt failed, when no answer came
    next_attempt_at: int | None  # unix seconds; None once delivered or given up
    lease_until: int  # a deliverer is sending it until then
    updated_at: int


class DueDelivery(msgspec.Struct, frozen=True, kw_only=True):
    """A delivery taken to send: its state, and where and how to send it."""

    delivery: DeliveryRecord
    url: str
    secret_salt: str


def deliveries_of(event: WebhookEventRecord, webhooks: list[Row], now: int) -> list[DeliveryRecord]:
    """The deliveries of ``event`` (due at ``now``) to the webhooks (rows of ``id,
    events``) that receive its type."""
    return [
        DeliveryRecord(
            event_id=event.event_id,
            webhook_id=str(webhook_id),
            account_pid=event.account_pid,
            type=event.type,
            created=event.created,
            data=event.data,
            status="pending",
            attempt=0,
            status_code=None,
            error=None,
            next_attempt_at=now,
            lease_until=0,
            updated_at=now,
        )
        for webhook_id, types in webhooks
        if event.type in str(types).split(" ")
    ]


def subscriptions(rows: list[Row]) -> dict[str, set[str]]:
    """Rows of ``WEBHOOK_SUBSCRIPTIONS`` as the types each account's webhooks receive."""
    found: dict[str, set[str]] = {}
    for pid, types in rows:
        found.setdefault(str(pid), set()).update(str(types).split(" "))
    return found


def recorded_delivery(d: DeliveryRecord) -> Row:
    """The arguments of ``RECORD_DELIVERY`` for a delivery's new state."""
    return (
        d.status,
        d.attempt,
        d.status_code,
        d.error,
        d.next_attempt_at,
        d.lease_until,
        d.updated_at,
        d.event_id,
        d.webhook_id,
    )


def due_delivery(row: Row) -> DueDelivery:
    """A row of ``DUE_DELIVERIES``."""
    *delivery, url, salt = row
    return DueDelivery(
        delivery=to_record(DeliveryRecord, tuple(delivery)), url=str(url), secret_salt=str(salt)
    )


class GrantTotal(msgspec.Struct, frozen=True, kw_only=True):
    """Sum of an account's grants to one pool."""

    account_pid: str
    pool: str
    credits: int
    last_granted_at: int
    last_expires_at: int | None  # latest expires_at of the pool's grants (earned: rolling)


class LedgerSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """The durable ledger at one instant (one read transaction): the flush cursors and
    every sum the balances follow from, consistent with those cursors."""

    accounts: list[AccountRecord]
    cursors: dict[int, str]  # shard -> last stream id applied
    grants: list[GrantTotal]
    usage: list[UsageRollup]  # one per account, environment and API (kid, alias, day empty)
    expiries: dict[str, int]  # account -> credits expired
    # one per account, environment, API, day, key and model from the day asked for on
    usage_days: list[UsageRollup]


def to_row(rec: msgspec.Struct) -> Row:
    """A record's values in column order (the order of its fields)."""
    return msgspec.structs.astuple(rec)


def to_record(record: type[R], row: Row) -> R:
    """A row read with the record's columns, as the record."""
    return msgspec.convert(dict(zip(record.__struct_fields__, row, strict=True)), record)


def usage_sums(pid: str, environment: str, day: str, sums: Row, *, api: str = "") -> UsageRollup:
    """A rollup of summed counters (kid and alias empty; day empty for totals, api for sums
    over every API). A driver's SUM may come back as None (no rows) or a Decimal
    (PostgreSQL's SUM of a BIGINT)."""
    requests, prompt_tokens, completion_tokens, credits = (int(s or 0) for s in sums)
    return UsageRollup(
        account_pid=pid,
        kid="",
        day=day,
        alias="",
        environment=environment,
        api=api,
        requests=requests,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        credits=credits,
    )


def grouped_sums(pid: str, environment: str, group_by: str, row: Row) -> UsageRollup:
    """A row of a grouped daily statement (day, the group's value, the sums) as a rollup
    with the grouped field set."""
    day, value, *sums = row
    return msgspec.structs.replace(
        usage_sums(pid, environment, str(day), tuple(sums)), **{group_by: str(value)}
    )


def ledger_snapshot(
    accounts: list[AccountRecord],
    cursors: list[Row],
    grants: list[Row],
    usage: list[Row],
    expiries: list[Row],
    *,
    usage_days: list[Row],
) -> LedgerSnapshot:
    """A snapshot from the rows of the ``LIST_ACCOUNTS``, ``LIST_CURSORS``,
    ``GRANT_TOTALS``, ``USAGE_BY_ACCOUNT``, ``EXPIRY_TOTALS`` and
    ``USAGE_DAYS_BY_ACCOUNT`` statements."""
    return LedgerSnapshot(
        accounts=accounts,
        cursors={int(shard): str(last_id) for shard, last_id in cursors},
        grants=[
            GrantTotal(
                account_pid=str(pid),
                pool=str(pool),
                credits=int(credits or 0),
                last_granted_at=int(last or 0),
                last_expires_at=None if expires is None else int(expires),
            )
            for pid, pool, credits, last, expires in grants
        ],
        usage=[
            msgspec.structs.replace(
                usage_sums(str(row[0]), str(row[1]), "", row[3:7], api=str(row[2])),
                earned_credits=int(row[7] or 0),
            )
            for row in usage
        ],
        expiries={str(pid): int(credits or 0) for pid, credits in expiries},
        usage_days=[
            msgspec.structs.replace(
                usage_sums(str(row[0]), str(row[1]), str(row[3]), row[6:10], api=str(row[2])),
                kid=str(row[4]),
                alias=str(row[5]),
            )
            for row in usage_days
        ],
    )
