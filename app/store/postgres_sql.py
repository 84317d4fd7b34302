"""PostgreSQL's statements: the shared SQL of ``app.store.migrations`` converted once to
PostgreSQL's dialect, and the statements only PostgreSQL runs (advisory locks, the
snapshot's isolation)."""

from __future__ import annotations

import msgspec

from app.store import migrations as sql
from app.store.records import AccountRecord, GrantRecord, KeyRecord, UsageRollup

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


def _pg(query: str) -> str:
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


MIGRATIONS = tuple((version, tuple(map(_pg, stmts))) for version, stmts in sql.MIGRATIONS)
CREATE_SCHEMA_MIGRATIONS = _pg(sql.CREATE_SCHEMA_MIGRATIONS)
MIGRATION_APPLIED = _pg(sql.MIGRATION_APPLIED)
RECORD_MIGRATION = _pg(sql.RECORD_MIGRATION)
PING = _pg(sql.PING)
INSERT_ACCOUNT = _pg(sql.INSERT_ACCOUNT)
GET_ACCOUNT = _pg(sql.GET_ACCOUNT)
LIST_ACCOUNTS = _pg(sql.LIST_ACCOUNTS)
INSERT_KEY = _pg(sql.INSERT_KEY)
GET_KEY = _pg(sql.GET_KEY)
GET_ACCOUNT_KEY = _pg(sql.GET_ACCOUNT_KEY)
LIST_KEYS = _pg(sql.LIST_KEYS)
COUNT_ACTIVE_KEYS = _pg(sql.COUNT_ACTIVE_KEYS)
REVOKE_KEY = _pg(sql.REVOKE_KEY)
ROTATABLE_KEY = _pg(sql.ROTATABLE_KEY)
KEY_SUCCESSOR = _pg(sql.KEY_SUCCESSOR)
END_ROTATED_KEY = _pg(sql.END_ROTATED_KEY)
UPDATE_KEY = {column: _pg(q) for column, q in sql.UPDATE_KEY.items()}
INSERT_GRANT = _pg(sql.INSERT_GRANT)
GET_GRANT = _pg(sql.GET_GRANT)
LIST_GRANTS = _pg(sql.LIST_GRANTS)
GET_CURSOR = _pg(sql.GET_CURSOR)
UPSERT_CURSOR = _pg(sql.UPSERT_CURSOR)
UPSERT_USAGE = _pg(sql.UPSERT_USAGE)
USAGE_DAILY = _pg(sql.USAGE_DAILY)
USAGE_DAILY_GROUPED = {group: _pg(q) for group, q in sql.USAGE_DAILY_GROUPED.items()}
USAGE_TOTALS = _pg(sql.USAGE_TOTALS)
LAST_USAGE_DAY = _pg(sql.LAST_USAGE_DAY)
LIST_GRANTS_SINCE = _pg(sql.LIST_GRANTS_SINCE)
LIST_ALL_KEYS = _pg(sql.LIST_ALL_KEYS)
INSERT_EXPIRY = _pg(sql.INSERT_EXPIRY)
SNAPSHOT_QUERIES = tuple(
    _pg(q) for q in (sql.LIST_CURSORS, sql.GRANT_TOTALS, sql.USAGE_BY_ACCOUNT, sql.EXPIRY_TOTALS)
)
USAGE_DAYS_BY_ACCOUNT = _pg(sql.USAGE_DAYS_BY_ACCOUNT)
# The first statement of a snapshot's transaction: every later read sees the same instant.
SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
# PostgreSQL only: key inserts of one account take turns, so seq grows with each key.
LOCK_ACCOUNT = "SELECT 1 FROM accounts WHERE pid = %s FOR NO KEY UPDATE"
