"""Every SQL statement the store engines share, written once.

Only SQL that SQLite and PostgreSQL both accept. Statements use ``?`` placeholders; the
PostgreSQL store swaps them for ``%s`` (no statement holds a literal ``?`` or ``%``).
Column lists come from the record types, so a record and its table cannot drift apart.
"""

from __future__ import annotations

from typing import Any

import msgspec

from app.core.clock import DAY_S
from app.store.records import (
    AccountQuery,
    AccountRecord,
    ActivityQuery,
    ActivityRecord,
    CreditExpiry,
    DeliveryRecord,
    KeyRecord,
    Row,
    UsageRollup,
    WebhookRecord,
)


def columns(record: type[msgspec.Struct]) -> tuple[str, ...]:
    """The table columns of a record type, in the order rows are read and written."""
    return record.__struct_fields__


def _insert(table: str, record: type[msgspec.Struct]) -> str:
    names = columns(record)
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"


def _select(table: str, record: type[msgspec.Struct]) -> str:
    return f"SELECT {', '.join(columns(record))} FROM {table}"


PING = "SELECT 1"

# An external id another account has: nothing written (the unique index decides, so two
# creations at once cannot both take it); a pid that exists is a conflict (StoreConflict).
INSERT_ACCOUNT = _insert("accounts", AccountRecord) + " ON CONFLICT (external_id) DO NOTHING"
GET_ACCOUNT = _select("accounts", AccountRecord) + " WHERE pid = ?"
GET_ACCOUNT_BY_EXTERNAL_ID = _select("accounts", AccountRecord) + " WHERE external_id = ?"
# Another account's external id fails the unique index: StoreConflict, nothing written.
SET_EXTERNAL_ID = "UPDATE accounts SET external_id = ? WHERE pid = ?"
SET_LOW_BALANCE = "UPDATE accounts SET low_balance_credits = ? WHERE pid = ?"
SET_ACCOUNT_STATUS = "UPDATE accounts SET status = ? WHERE pid = ?"
LIST_ACCOUNTS = _select("accounts", AccountRecord) + " ORDER BY created_at, pid"
# an account whose Redis hash could not be opened, before anything else refers to it
DELETE_NEW_ACCOUNT = (
    "DELETE FROM accounts WHERE pid = ? AND NOT EXISTS "
    "(SELECT 1 FROM api_keys WHERE account_pid = ?) AND NOT EXISTS "
    "(SELECT 1 FROM credit_grants WHERE account_pid = ?)"
)


def account_page(query: AccountQuery) -> tuple[str, Row]:
    """The statement (and its arguments) of one page of accounts, newest first: a range
    scan of the accounts' creation index, filtered by what ``query`` matches (its id, or
    the accounts of the key with that id or those last four characters: the keys' primary
    key and their last4 index), and to the account of an external id when it names one."""
    args: list[Any] = []
    matches: list[str] = []
    if query.pid is not None:
        matches.append("pid = ?")
        args.append(query.pid)
    keyed = [(c, v) for c, v in (("kid = ?", query.kid), ("last4 = ?", query.last4)) if v]
    if keyed:
        found = " OR ".join(condition for condition, _ in keyed)
        matches.append(f"pid IN (SELECT account_pid FROM api_keys WHERE {found})")
        args += [value for _, value in keyed]
    where = ["(" + " OR ".join(matches) + ")"] if matches else []
    if query.external_id is not None:
        where.append("external_id = ?")
        args.append(query.external_id)
    if query.after is not None:
        where.append("(created_at, pid) < (?, ?)")
        args += list(query.after)
    statement = (
        _select("accounts", AccountRecord)
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY created_at DESC, pid DESC LIMIT ?"
    )
    return statement, (*args, query.limit)


# The extra argument is the account_pid again, for the seq subquery; the write lock
# (SQLite) or the key limit check's row lock (PostgreSQL) keeps seq ordered.
INSERT_KEY = (
    f"INSERT INTO api_keys ({', '.join(columns(KeyRecord))}, seq) "
    f"VALUES ({', '.join('?' * len(columns(KeyRecord)))}, "
    "(SELECT COALESCE(MAX(seq), 0) + 1 FROM api_keys WHERE account_pid = ?))"
)
GET_KEY = _select("api_keys", KeyRecord) + " WHERE kid = ?"
GET_ACCOUNT_KEY = _select("api_keys", KeyRecord) + " WHERE kid = ? AND account_pid = ?"
LIST_KEYS = (
    _select("api_keys", KeyRecord)
    + " WHERE account_pid = ? ORDER BY created_at DESC, seq DESC, kid"
)
# Active: neither revoked nor expired at the time given.
COUNT_ACTIVE_KEYS = (
    "SELECT COUNT(*) FROM api_keys WHERE account_pid = ? AND status = 'active' "
    "AND (expires_at IS NULL OR expires_at > ?)"
)
# The columns a key update may set, each in a statement of its own (only the fields a client
# sent change: two updates of different fields never undo each other). Any key of the
# account, revoked ones too: the status is not the update's to change.
KEY_UPDATABLE = (
    "name",
    "daily_cap_credits",
    "expires_at",
    "allowed_models",
    "rate_limit_rpm",
    "max_credits_per_request",
    "role",
)
UPDATE_KEY = {
    column: f"UPDATE api_keys SET {column} = ? WHERE kid = ? AND account_pid = ?"
    for column in KEY_UPDATABLE
}
# A rotation: the key rotated from must be active, unexpired and not rotated before (one
# live successor per key: revoking a successor allows another), checked and changed under
# the account's write lock.
ROTATABLE_KEY = (
    "SELECT kid FROM api_keys WHERE kid = ? AND account_pid = ? AND status = 'active' "
    "AND (expires_at IS NULL OR expires_at > ?)"
)
KEY_SUCCESSOR = (
    "SELECT kid FROM api_keys WHERE account_pid = ? AND replaces = ? AND status = 'active'"
)
# Its expiry moves to the end of the grace period unless it expires sooner.
END_ROTATED_KEY = (
    "UPDATE api_keys SET expires_at = ? WHERE kid = ? AND account_pid = ? "
    "AND (expires_at IS NULL OR expires_at > ?)"
)
# Only an active key changes, so a second revoke keeps the first revoked_at.
REVOKE_KEY = (
    "UPDATE api_keys SET status = 'revoked', revoked_at = ? "
    "WHERE kid = ? AND account_pid = ? AND status = 'active'"
)

LIST_ALL_KEYS = _select("api_keys", KeyRecord) + " ORDER BY account_pid, created_at, kid"
# what each account's applied ledger entries asked, per pool (credits - debt_change: the
# pools less the debt moved by that much); pending entries are the repair's to apply
GRANT_TOTALS = (
    "SELECT account_pid, pool, SUM(credits - debt_change), MAX(created_at), MAX(expires_at) "
    "FROM credit_grants WHERE applied_at IS NOT NULL GROUP BY account_pid, pool"
)
INSERT_EXPIRY = _insert("credit_expiries", CreditExpiry) + " ON CONFLICT (expiry_id) DO NOTHING"
INSERT_ACTIVITY = (
    _insert("activity", ActivityRecord)
    + " ON CONFLICT (account_pid, environment, created, event_key) DO NOTHING"
)
INSERT_WEBHOOK = _insert("webhooks", WebhookRecord)
_LIVE_WEBHOOKS = (
    _select("webhooks", WebhookRecord) + " WHERE account_pid = ? AND deleted_at IS NULL"
)
GET_WEBHOOK = _LIVE_WEBHOOKS + " AND id = ?"
LIST_WEBHOOKS = _LIVE_WEBHOOKS + " ORDER BY created_at, id"
COUNT_WEBHOOKS = "SELECT COUNT(*) FROM webhooks WHERE account_pid = ? AND deleted_at IS NULL"
WEBHOOK_UPDATABLE = ("url", "events", "description")
UPDATE_WEBHOOK = {
    column: f"UPDATE webhooks SET {column} = ? WHERE id = ? AND account_pid = ? "
    "AND deleted_at IS NULL"
    for column in WEBHOOK_UPDATABLE
}
DELETE_WEBHOOK = (
    "UPDATE webhooks SET deleted_at = ? WHERE id = ? AND account_pid = ? AND deleted_at IS NULL"
)
WEBHOOK_SUBSCRIPTIONS = "SELECT account_pid, events FROM webhooks WHERE deleted_at IS NULL"
ACCOUNT_WEBHOOK_EVENTS = (
    "SELECT id, events FROM webhooks WHERE account_pid = ? AND deleted_at IS NULL"
)
INSERT_DELIVERY = (
    _insert("webhook_deliveries", DeliveryRecord) + " ON CONFLICT (event_id, webhook_id) DO NOTHING"
)
_DELIVERY_COLUMNS = ", ".join(f"d.{f}" for f in DeliveryRecord.__struct_fields__)
# Deliveries whose time has come, of webhooks not deleted, with where and how to sign.
DUE_DELIVERIES = (
    f"SELECT {_DELIVERY_COLUMNS}, w.url, w.secret_salt FROM webhook_deliveries d "
    "JOIN webhooks w ON w.id = d.webhook_id "
    "WHERE d.status = 'pending' AND d.next_attempt_at <= ? AND d.lease_until <= ? "
    "AND w.deleted_at IS NULL ORDER BY d.next_attempt_at LIMIT ?"
)
# One deliverer sends a delivery: the one whose claim changed the row.
CLAIM_DELIVERY = (
    "UPDATE webhook_deliveries SET lease_until = ? WHERE event_id = ? AND webhook_id = ? "
    "AND status = 'pending' AND lease_until <= ?"
)
RECORD_DELIVERY = (
    "UPDATE webhook_deliveries SET status = ?, attempt = ?, status_code = ?, error = ?, "
    "next_attempt_at = ?, lease_until = ?, updated_at = ? WHERE event_id = ? AND webhook_id = ?"
)
# A batch of deliveries of events older than a time (the caller repeats it).
PRUNE_DELIVERIES = (
    "DELETE FROM webhook_deliveries WHERE (event_id, webhook_id) IN "
    "(SELECT event_id, webhook_id FROM webhook_deliveries WHERE created < ? LIMIT ?)"
)
LIST_DELIVERIES = (
    _select("webhook_deliveries", DeliveryRecord)
    + " WHERE webhook_id = ? ORDER BY created DESC, event_id DESC LIMIT ?"
)

# The row an `after` names: the newest of the account's with that id.
ACTIVITY_POSITION = (
    "SELECT created, event_key FROM activity WHERE account_pid = ? AND id = ? "
    "ORDER BY created DESC, event_key DESC LIMIT 1"
)
# One request's row (a receipt), found by the account and the id (the activity_ids index).
GET_ACTIVITY = (
    _select("activity", ActivityRecord)
    + " WHERE account_pid = ? AND id = ? ORDER BY created DESC, event_key DESC LIMIT 1"
)
# A batch of rows of the UTC days before a time's, by the day index (the caller repeats it).
PRUNE_ACTIVITY = (
    "DELETE FROM activity WHERE event_key IN "
    f"(SELECT event_key FROM activity WHERE created / {DAY_S} < ? / {DAY_S} LIMIT ?)"
)


def activity_page(query: ActivityQuery) -> tuple[str, Row]:
    """The statement (and its arguments) of one page of activity: the filters are
    equalities on an index's leading columns and ranges on its last two, so the page is
    one range scan of that index, in its order."""
    where = ["account_pid = ?", "environment = ?"]
    args: list[Any] = [query.account_pid, query.environment]
    optional = (
        ("kid = ?", query.kid),
        ("model = ?", query.model),
        ("created >= ?", query.since),
        ("created < ?", query.until),
    )
    for condition, value in optional:
        if value is not None:
            where.append(condition)
            args.append(value)
    if query.after is not None:
        where.append("(created, event_key) < (?, ?)")
        args += list(query.after)
    statement = (
        _select("activity", ActivityRecord)
        + " WHERE "
        + " AND ".join(where)
        + " ORDER BY created DESC, event_key DESC LIMIT ?"
    )
    return statement, (*args, query.limit)


EXPIRY_TOTALS = "SELECT account_pid, SUM(credits) FROM credit_expiries GROUP BY account_pid"
LIST_CURSORS = "SELECT shard, last_id FROM flush_cursors"

GET_CURSOR = "SELECT last_id FROM flush_cursors WHERE shard = ?"
UPSERT_CURSOR = (
    "INSERT INTO flush_cursors (shard, last_id, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT (shard) DO UPDATE SET last_id = excluded.last_id, "
    "updated_at = excluded.updated_at"
)

USAGE_COUNTERS = ("requests", "prompt_tokens", "completion_tokens", "credits")
UPSERT_USAGE = (
    _insert("usage_daily", UsageRollup)
    + " ON CONFLICT (account_pid, kid, day, alias, environment, api) DO UPDATE SET "
    + ", ".join(
        f"{c} = usage_daily.{c} + excluded.{c}" for c in (*USAGE_COUNTERS, "earned_credits")
    )
)
_SUMS = ", ".join(f"SUM({c})" for c in USAGE_COUNTERS)
USAGE_DAILY = (
    f"SELECT day, {_SUMS} FROM usage_daily "
    "WHERE account_pid = ? AND day >= ? AND environment = ? GROUP BY day ORDER BY day DESC"
)
# The columns a day's usage can be broken down by (``usage_daily(group_by=…)``): named by
# the UsageRollup field, which is also the column.
USAGE_GROUPS = ("api", "kid", "alias")
USAGE_DAILY_GROUPED = {
    group: (
        f"SELECT day, {group}, {_SUMS} FROM usage_daily "
        "WHERE account_pid = ? AND day >= ? AND environment = ? "
        f"GROUP BY day, {group} ORDER BY day DESC, {group}"
    )
    for group in USAGE_GROUPS
}
# COUNT(*) tells "no rows" apart from rows that sum to zero; the last argument is a day
# past every real one for all-time totals ("9999-12-31"), or where the sums stop.
USAGE_TOTALS = (
    f"SELECT COUNT(*), {_SUMS} FROM usage_daily "
    "WHERE account_pid = ? AND environment = ? AND day < ?"
)
LAST_USAGE_DAY = "SELECT MAX(day) FROM usage_daily"
# Per account, environment and API, all time: the usage side of the ledger (reconcile).
USAGE_BY_ACCOUNT = (
    f"SELECT account_pid, environment, api, {_SUMS}, SUM(earned_credits) FROM usage_daily "
    "GROUP BY account_pid, environment, api"
)
# Per account, environment, API, day, key and model, from a day on: the day counters
# reconcile compares (the day's, and those of each key and model).
USAGE_DAYS_BY_ACCOUNT = (
    f"SELECT account_pid, environment, api, day, kid, alias, {_SUMS} FROM usage_daily "
    "WHERE day >= ? GROUP BY account_pid, environment, api, day, kid, alias"
)
