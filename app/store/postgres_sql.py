"""PostgreSQL's statements: the shared SQL of ``app.store.migrations`` converted once to
PostgreSQL's dialect, and the statements only PostgreSQL runs (advisory locks, the
snapshot's isolation)."""

from __future__ import annotations

import msgspec

from app.store import migrations as sql
from app.store.records import (
    AccountRecord,
    ActivityQuery,
    GrantRecord,
    KeyRecord,
    Row,
    UsageRollup,
)

# Advisory lock keys (the two-int form; its key space is apart from the one-bigint form).
LOCK_CLASS = 0x5356_4300  # "SVC\0": every lock of this store
MIGRATION_LOCK = 0  # (LOCK_CLASS, 0) while a process migrates
USAGE_LOCK_CLASS = LOCK_CLASS + 1  # (USAGE_LOCK_CLASS, shard) while a shard's batch applies
LOCK = "SELECT pg_advisory_xact_lock(%s::integer, %s::integer)"

# Text columns of the records: sorting on them must not depend on the database collation.
_TEXT_COLUMNS = frozenset(
    field.name
    for record in (AccountRecord, KeyRecord, GrantRecord, UsageRollup)
    for field in msgspec.structs.fields(record)
    if field.type is str
)


def pg(query: str) -> str:
    """A shared statement in PostgreSQL's dialect: ``%s`` placeholders, byte-wise sorts."""
    if "%" in query:
        raise ValueError(f"a shared statement holds a literal %: {query}")
    head, order_by, order = query.partition(" ORDER BY ")
    if order_by:
        terms = []
        for term in order.split(", "):
            column, _, direction = term.partition(" ")
            if column in _TEXT_COLUMNS:
                term = f'{column} COLLATE "C" {direction}'.rstrip()
            terms.append(term)
        query = head + order_by + ", ".join(terms)
    return query.replace("?", "%s")


MIGRATIONS = tuple((version, tuple(map(pg, stmts))) for version, stmts in sql.MIGRATIONS)
CREATE_SCHEMA_MIGRATIONS = pg(sql.CREATE_SCHEMA_MIGRATIONS)
MIGRATION_APPLIED = pg(sql.MIGRATION_APPLIED)
RECORD_MIGRATION = pg(sql.RECORD_MIGRATION)
PING = pg(sql.PING)
INSERT_ACCOUNT = pg(sql.INSERT_ACCOUNT)
GET_ACCOUNT = pg(sql.GET_ACCOUNT)
SET_LOW_BALANCE = pg(sql.SET_LOW_BALANCE)
LIST_ACCOUNTS = pg(sql.LIST_ACCOUNTS)
INSERT_KEY = pg(sql.INSERT_KEY)
GET_KEY = pg(sql.GET_KEY)
GET_ACCOUNT_KEY = pg(sql.GET_ACCOUNT_KEY)
LIST_KEYS = pg(sql.LIST_KEYS)
COUNT_ACTIVE_KEYS = pg(sql.COUNT_ACTIVE_KEYS)
REVOKE_KEY = pg(sql.REVOKE_KEY)
ROTATABLE_KEY = pg(sql.ROTATABLE_KEY)
KEY_SUCCESSOR = pg(sql.KEY_SUCCESSOR)
END_ROTATED_KEY = pg(sql.END_ROTATED_KEY)
UPDATE_KEY = {column: pg(q) for column, q in sql.UPDATE_KEY.items()}
INSERT_GRANT = pg(sql.INSERT_GRANT)
GET_GRANT = pg(sql.GET_GRANT)
LIST_GRANTS = pg(sql.LIST_GRANTS)
GET_CURSOR = pg(sql.GET_CURSOR)
UPSERT_CURSOR = pg(sql.UPSERT_CURSOR)
UPSERT_USAGE = pg(sql.UPSERT_USAGE)
USAGE_DAILY = pg(sql.USAGE_DAILY)
USAGE_DAILY_GROUPED = {group: pg(q) for group, q in sql.USAGE_DAILY_GROUPED.items()}
USAGE_TOTALS = pg(sql.USAGE_TOTALS)
LAST_USAGE_DAY = pg(sql.LAST_USAGE_DAY)
LIST_GRANTS_SINCE = pg(sql.LIST_GRANTS_SINCE)
LIST_ALL_KEYS = pg(sql.LIST_ALL_KEYS)
INSERT_EXPIRY = pg(sql.INSERT_EXPIRY)
INSERT_ACTIVITY = pg(sql.INSERT_ACTIVITY)
INSERT_WEBHOOK = pg(sql.INSERT_WEBHOOK)
GET_WEBHOOK = pg(sql.GET_WEBHOOK)
LIST_WEBHOOKS = pg(sql.LIST_WEBHOOKS)
COUNT_WEBHOOKS = pg(sql.COUNT_WEBHOOKS)
UPDATE_WEBHOOK = {column: pg(q) for column, q in sql.UPDATE_WEBHOOK.items()}
DELETE_WEBHOOK = pg(sql.DELETE_WEBHOOK)
ACCOUNT_WEBHOOK_EVENTS = pg(sql.ACCOUNT_WEBHOOK_EVENTS)
WEBHOOK_SUBSCRIPTIONS = pg(sql.WEBHOOK_SUBSCRIPTIONS)
INSERT_DELIVERY = pg(sql.INSERT_DELIVERY)
DUE_DELIVERIES = pg(sql.DUE_DELIVERIES)
CLAIM_DELIVERY = pg(sql.CLAIM_DELIVERY)
RECORD_DELIVERY = pg(sql.RECORD_DELIVERY)
LIST_DELIVERIES = pg(sql.LIST_DELIVERIES)
PRUNE_DELIVERIES = pg(sql.PRUNE_DELIVERIES)
ACTIVITY_POSITION = pg(sql.ACTIVITY_POSITION)
PRUNE_ACTIVITY = pg(sql.PRUNE_ACTIVITY)


def activity_page(query: ActivityQuery) -> tuple[str, Row]:
    """``migrations.activity_page`` in PostgreSQL's dialect."""
    statement, args = sql.activity_page(query)
    return pg(statement), args


SNAPSHOT_QUERIES = tuple(
    pg(q) for q in (sql.LIST_CURSORS, sql.GRANT_TOTALS, sql.USAGE_BY_ACCOUNT, sql.EXPIRY_TOTALS)
)
USAGE_DAYS_BY_ACCOUNT = pg(sql.USAGE_DAYS_BY_ACCOUNT)
# The first statement of a snapshot's transaction: every later read sees the same instant.
SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
# PostgreSQL only: key inserts of one account take turns, so seq grows with each key.
LOCK_ACCOUNT = "SELECT 1 FROM accounts WHERE pid = %s FOR NO KEY UPDATE"
