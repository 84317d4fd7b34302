"""The events a webhook can receive, and the body each delivery carries."""

from __future__ import annotations

import hashlib
from typing import Any, Final

import msgspec

from app.keys.format import public_id
from app.store import GrantRecord, WebhookEventRecord

KEY_REVOKED: Final = "key.revoked"
KEY_ROTATED: Final = "key.rotated"
KEY_EXPIRING: Final = "key.expiring"
EARNED: Final = "credits.earned"
EARNED_EXPIRING: Final = "credits.earned_expiring"
EARNED_EXPIRED: Final = "credits.earned_expired"
CREDITS_LOW: Final = "credits.low"
CREDITS_PURCHASED: Final = "credits.purchased"
CREDITS_REFUNDED: Final = "credits.refunded"  # a refund, a dispute or an operator's debit
ACCOUNT_IN_DEBT: Final = "account.in_debt"
KEY_CAP_THRESHOLD: Final = "key.cap_threshold"
EVENT_TYPES: Final = (
    CREDITS_LOW,
    KEY_CAP_THRESHOLD,
    KEY_REVOKED,
    KEY_ROTATED,
    KEY_EXPIRING,
    EARNED,
    EARNED_EXPIRING,
    EARNED_EXPIRED,
    CREDITS_PURCHASED,
    CREDITS_REFUNDED,
    ACCOUNT_IN_DEBT,
)
"""Every type a webhook may subscribe to."""

KEY_EXPIRING_NOTICE_S: Final = 7 * 86_400  # key.expiring: this long before expires_at
EARNED_EXPIRING_NOTICE_S: Final = 3 * 86_400  # credits.earned_expiring: before the expiry


class EventBody(msgspec.Struct, kw_only=True):
    """A delivery's JSON body: the same for every attempt of it."""

    id: str  # evt_…: one occurrence; a receiver deduplicates by it
    type: str
    created: int  # unix seconds it happened
    data: msgspec.Raw


def event_id(*occurrence: str | int) -> str:
    """A stable id for one occurrence (its type and what tells it apart), so a write
    retried after a lost answer adds the event once."""
    text = "\0".join(str(part) for part in occurrence)
    return "evt_" + hashlib.sha256(text.encode()).hexdigest()[:32]


def encode_data(data: dict[str, Any]) -> str:
    return msgspec.json.encode(data).decode()


def credits_low(
    account_pid: str, recorded_as: str, balance: int, low: int, at: int
) -> WebhookEventRecord:
    """``credits.low`` for a crossing settle recorded (``recorded_as``: shard and stream id)."""
    return WebhookEventRecord(
        event_id=event_id(CREDITS_LOW, recorded_as),
        account_pid=account_pid,
        type=CREDITS_LOW,
        created=at,
        data=encode_data({"balance": balance, "low_balance_credits": low}),
    )


def cap_threshold(
    account_pid: str, kid: str, counter: str, level: int, cap: int, spent: int, at: int
) -> WebhookEventRecord:
    """``key.cap_threshold``: once per cap counter (a key lineage's day) and level, however
    often a reserve takes the counter past it (refunds may take it back under)."""
    return WebhookEventRecord(
        event_id=event_id(KEY_CAP_THRESHOLD, counter, level),
        account_pid=account_pid,
        type=KEY_CAP_THRESHOLD,
        created=at,
        data=encode_data(
            {
                "key_id": public_id(kid),
                "percent": level,
                "daily_cap_credits": cap,
                "spent_credits": spent,
            }
        ),
    )


def credits_earned(
    account_pid: str, grant_id: str, credits: int, earned_expires_at: int, at: int
) -> WebhookEventRecord:
    """``credits.earned`` for a reward granted (once per grant id: a retried reward, or one
    recorded again after a crash, queues it once)."""
    return WebhookEventRecord(
        event_id=event_id(EARNED, grant_id),
        account_pid=account_pid,
        type=EARNED,
        created=at,
        data=encode_data({"credits": credits, "earned_expires_at": earned_expires_at}),
    )


def earned_expired(account_pid: str, recorded_as: str, credits: int, at: int) -> WebhookEventRecord:
    """``credits.earned_expired`` for an expiry a script recorded (``recorded_as``: its
    shard and stream id, so a replayed flush queues it once)."""
    return WebhookEventRecord(
        event_id=event_id(EARNED_EXPIRED, recorded_as),
        account_pid=account_pid,
        type=EARNED_EXPIRED,
        created=at,
        data=encode_data({"credits": credits, "expired_at": at}),
    )


def ledger_events(entry: GrantRecord, debt: int) -> list[WebhookEventRecord]:
    """The events of a ledger entry Redis applied (``app.accounts.ledger``), queued with its
    mark, once per entry id: ``credits.earned`` for a reward, ``credits.purchased`` for a
    purchase, ``credits.refunded`` for a refund, a dispute or a debit, and
    ``account.in_debt`` when it left the account owing ``debt`` credits."""
    at = entry.applied_at or entry.created_at
    pid = entry.account_pid
    found: list[WebhookEventRecord] = []
    about = {"entry_id": entry.grant_id, "source": entry.source, "reference": entry.reference}
    if entry.kind == "reward":
        expires = at + (entry.expires_at - entry.created_at if entry.expires_at else 0)
        found.append(credits_earned(pid, entry.grant_id, entry.credits, expires, at))
    elif entry.kind == "purchase":
        data = {
            **about,
            "credits": entry.credits - entry.debt_change,
            "debt_paid": -entry.debt_change,
        }
        found.append(_event(CREDITS_PURCHASED, pid, entry.grant_id, data, at))
    elif entry.kind in ("refund", "dispute", "debit"):
        data = {**about, "kind": entry.kind, "credits": -entry.credits, "owed": entry.debt_change}
        found.append(_event(CREDITS_REFUNDED, pid, entry.grant_id, data, at))
    if entry.debt_change > 0:
        data = {"debt": debt, "entry_id": entry.grant_id, "kind": entry.kind}
        found.append(_event(ACCOUNT_IN_DEBT, pid, entry.grant_id, data, at))
    return found


def _event(
    kind: str, pid: str, occurrence: str, data: dict[str, Any], at: int
) -> WebhookEventRecord:
    return WebhookEventRecord(
        event_id=event_id(kind, occurrence),
        account_pid=pid,
        type=kind,
        created=at,
        data=encode_data(data),
    )
