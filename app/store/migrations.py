"""Versioned schema migrations and every SQL statement the store drivers share.

Only SQL that SQLite and PostgreSQL both accept. Statements use ``?`` placeholders; the
PostgreSQL driver swaps them for ``%s`` (no statement holds a literal ``?`` or ``%``).
Column lists come from the record types, so a record and its table cannot drift apart.
"""

from __future__ import annotations

from typing import Any

import msgspec

from app.core.clock import DAY_S
from app.store.records import (
    AccountRecord,
    ActivityQuery,
    ActivityRecord,
    CreditExpiry,
    DeliveryRecord,
    GrantRecord,
    KeyRecord,
    Row,
    UsageRollup,
    WebhookRecord,
)

Migration = tuple[int, tuple[str, ...]]

# Append only: a version, once released, never changes (databases already ran it).
MIGRATIONS: tuple[Migration, ...] = (
    (
        1,
        (
            """CREATE TABLE accounts (
                pid TEXT PRIMARY KEY,
                created_at BIGINT NOT NULL,
                status TEXT NOT NULL DEFAULT 'active'
            )""",
            """CREATE TABLE api_keys (
                kid TEXT PRIMARY KEY,
                account_pid TEXT NOT NULL REFERENCES accounts (pid),
                name TEXT NOT NULL,
                environment TEXT NOT NULL,
                daily_cap_credits BIGINT,
                secret_hash TEXT NOT NULL,
                last4 TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                status TEXT NOT NULL DEFAULT 'active',
                revoked_at BIGINT
            )""",
            "CREATE INDEX api_keys_account ON api_keys (account_pid, created_at)",
            """CREATE TABLE credit_grants (
                grant_id TEXT PRIMARY KEY,
                account_pid TEXT NOT NULL REFERENCES accounts (pid),
                pool TEXT NOT NULL,
                credits BIGINT NOT NULL,
                source TEXT NOT NULL,
                reference TEXT,
                created_at BIGINT NOT NULL,
                expires_at BIGINT
            )""",
            "CREATE INDEX credit_grants_account ON credit_grants (account_pid, created_at)",
            # No foreign key: the flusher must never fail on a row it cannot take back.
            """CREATE TABLE usage_daily (
                account_pid TEXT NOT NULL,
                kid TEXT NOT NULL,
                day TEXT NOT NULL,
                alias TEXT NOT NULL,
                environment TEXT NOT NULL,
                requests BIGINT NOT NULL,
                prompt_tokens BIGINT NOT NULL,
                completion_tokens BIGINT NOT NULL,
                credits BIGINT NOT NULL,
                PRIMARY KEY (account_pid, kid, day, alias, environment)
            )""",
            """CREATE TABLE flush_cursors (
                shard INTEGER PRIMARY KEY,
                last_id TEXT NOT NULL,
                updated_at BIGINT NOT NULL
            )""",
        ),
    ),
    (
        2,
        # Keys created in the same second still list newest first: seq counts an
        # account's keys in insertion order (keys from before v2 keep 0).
        ("ALTER TABLE api_keys ADD COLUMN seq BIGINT NOT NULL DEFAULT 0",),
    ),
    (
        3,
        # What balances follow from besides grants: the earned part of usage (rows from
        # before v3 keep 0) and the earned credits that lapsed. Expiries are keyed by
        # shard and stream id, so a replayed batch cannot write one twice.
        (
            "ALTER TABLE usage_daily ADD COLUMN earned_credits BIGINT NOT NULL DEFAULT 0",
            """CREATE TABLE credit_expiries (
                expiry_id TEXT PRIMARY KEY,
                account_pid TEXT NOT NULL,
                credits BIGINT NOT NULL,
                expired_at BIGINT NOT NULL
            )""",
            "CREATE INDEX credit_expiries_account ON credit_expiries (account_pid)",
        ),
    ),
    (
        4,
        # Usage by API (chat completions or responses): a key of its own, so the table is
        # made again (SQLite cannot change a primary key); rows from before v4 were chat.
        (
            """CREATE TABLE usage_daily_v4 (
                account_pid TEXT NOT NULL,
                kid TEXT NOT NULL,
                day TEXT NOT NULL,
                alias TEXT NOT NULL,
                environment TEXT NOT NULL,
                api TEXT NOT NULL,
                requests BIGINT NOT NULL,
                prompt_tokens BIGINT NOT NULL,
                completion_tokens BIGINT NOT NULL,
                credits BIGINT NOT NULL,
                earned_credits BIGINT NOT NULL DEFAULT 0,
                PRIMARY KEY (account_pid, kid, day, alias, environment, api)
            )""",
            """INSERT INTO usage_daily_v4 (account_pid, kid, day, alias, environment, api,
                requests, prompt_tokens, completion_tokens, credits, earned_credits)
            SELECT account_pid, kid, day, alias, environment, 'chat',
                requests, prompt_tokens, completion_tokens, credits, earned_credits
            FROM usage_daily""",
            "DROP TABLE usage_daily",
            "ALTER TABLE usage_daily_v4 RENAME TO usage_daily",
        ),
    ),
    (
        5,
        # Keys that expire (unix seconds; NULL: never).
        ("ALTER TABLE api_keys ADD COLUMN expires_at BIGINT",),
    ),
    (
        6,
        # Keys limited to some models and to a rate of their own, and keys made by rotating
        # another (NULL everywhere: all models, no limit, not a rotation).
        (
            "ALTER TABLE api_keys ADD COLUMN allowed_models TEXT",
            "ALTER TABLE api_keys ADD COLUMN rate_limit_rpm BIGINT",
            "ALTER TABLE api_keys ADD COLUMN lineage TEXT",
            "ALTER TABLE api_keys ADD COLUMN replaces TEXT",
        ),
    ),
    (
        7,
        # Request activity, newest first per account and environment: each listing (all:
        # the primary key; one key's, one model's) is one range scan of an index that ends
        # in the page order; `after` finds its row by id. Pruning walks the rows' UTC day:
        # an expression no page names, so no page is read by that index instead. The
        # event key (shard and stream id) makes a row's key unique: a replay conflicts.
        (
            """CREATE TABLE activity (
                event_key TEXT NOT NULL,
                account_pid TEXT NOT NULL,
                environment TEXT NOT NULL,
                created BIGINT NOT NULL,
                id TEXT NOT NULL,
                kid TEXT NOT NULL,
                requested_model TEXT NOT NULL,
                model TEXT NOT NULL,
                api TEXT NOT NULL,
                prompt_tokens BIGINT NOT NULL,
                completion_tokens BIGINT NOT NULL,
                credits_used BIGINT NOT NULL,
                outcome TEXT NOT NULL,
                ttfb_ms BIGINT NOT NULL,
                duration_ms BIGINT NOT NULL,
                usage_source TEXT NOT NULL,
                PRIMARY KEY (account_pid, environment, created, event_key)
            )""",
            "CREATE INDEX activity_by_key ON activity "
            "(account_pid, environment, kid, created, event_key)",
            "CREATE INDEX activity_by_model ON activity "
            "(account_pid, environment, model, created, event_key)",
            "CREATE INDEX activity_ids ON activity (account_pid, id)",
            f"CREATE INDEX activity_days ON activity ((created / {DAY_S}))",
        ),
    ),
    (
        8,
        # Webhooks and their outbox: one row per event and webhook, its delivery's state.
        # Due deliveries are found by status and time; a webhook's recent ones by event
        # time. A deleted webhook keeps its row (its deliveries stop).
        (
            """CREATE TABLE webhooks (
                id TEXT PRIMARY KEY,
                account_pid TEXT NOT NULL REFERENCES accounts (pid),
                url TEXT NOT NULL,
                events TEXT NOT NULL,
                description TEXT NOT NULL,
                secret_salt TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                deleted_at BIGINT
            )""",
            "CREATE INDEX webhooks_account ON webhooks (account_pid, created_at)",
            """CREATE TABLE webhook_deliveries (
                event_id TEXT NOT NULL,
                webhook_id TEXT NOT NULL,
                account_pid TEXT NOT NULL,
                type TEXT NOT NULL,
                created BIGINT NOT NULL,
                data TEXT NOT NULL,
                status TEXT NOT NULL,
                attempt BIGINT NOT NULL,
                status_code BIGINT,
                error TEXT,
                next_attempt_at BIGINT,
                lease_until BIGINT NOT NULL,
                updated_at BIGINT NOT NULL,
                PRIMARY KEY (event_id, webhook_id)
            )""",
            "CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at)",
            "CREATE INDEX webhook_deliveries_recent ON webhook_deliveries "
            "(webhook_id, created, event_id)",
        ),
    ),
    (
        9,
        # An account's low-balance threshold (webhooks' credits.low; NULL: none).
        ("ALTER TABLE accounts ADD COLUMN low_balance_credits BIGINT",),
    ),
    (
        10,
        # Old deliveries are deleted by the time of their event.
        ("CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created)",),
    ),
    (
        11,
        # What a key may do: admin (manage keys and webhooks) or inference. Keys made before
        # roles existed could do everything: they stay admin.
        ("ALTER TABLE api_keys ADD COLUMN role TEXT NOT NULL DEFAULT 'admin'",),
    ),
)

CREATE_SCHEMA_MIGRATIONS = (
    "CREATE TABLE IF NOT EXISTS schema_migrations "
    "(version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)"
)
MIGRATION_APPLIED = "SELECT 1 FROM schema_migrations WHERE version = ?"
RECORD_MIGRATION = "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)"


def columns(record: type[msgspec.Struct]) -> tuple[str, ...]:
    """The table columns of a record type, in the order rows are read and written."""
    return record.__struct_fields__


def _insert(table: str, record: type[msgspec.Struct]) -> str:
    names = columns(record)
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"


def _select(table: str, record: type[msgspec.Struct]) -> str:
    return f"SELECT {', '.join(columns(record))} FROM {table}"


PING = "SELECT 1"

INSERT_ACCOUNT = _insert("accounts", AccountRecord)
GET_ACCOUNT = _select("accounts", AccountRecord) + " WHERE pid = ?"
SET_LOW_BALANCE = "UPDATE accounts SET low_balance_credits = ? WHERE pid = ?"
LIST_ACCOUNTS = _select("accounts", AccountRecord) + " ORDER BY created_at, pid"

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

INSERT_GRANT = _insert("credit_grants", GrantRecord) + " ON CONFLICT (grant_id) DO NOTHING"
GET_GRANT = _select("credit_grants", GrantRecord) + " WHERE grant_id = ?"
LIST_GRANTS = (
    _select("credit_grants", GrantRecord) + " WHERE account_pid = ? ORDER BY created_at, grant_id"
)
LIST_GRANTS_SINCE = (
    _select("credit_grants", GrantRecord) + " WHERE created_at >= ? ORDER BY created_at, grant_id"
)
LIST_ALL_KEYS = _select("api_keys", KeyRecord) + " ORDER BY account_pid, created_at, kid"
GRANT_TOTALS = (
    "SELECT account_pid, pool, SUM(credits), MAX(created_at), MAX(expires_at) "
    "FROM credit_grants GROUP BY account_pid, pool"
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
    if query.kid is not None:
        where.append("kid = ?")
        args.append(query.kid)
    if query.model is not None:
        where.append("model = ?")
        args.append(query.model)
    if query.since is not None:
        where.append("created >= ?")
        args.append(query.since)
    if query.until is not None:
        where.append("created < ?")
        args.append(query.until)
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
