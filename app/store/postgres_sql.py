"""PostgreSQL's dialect: how a shared statement becomes PostgreSQL's, and the statements
only PostgreSQL runs (advisory and row locks, the snapshot's isolation).

PostgreSQL-only statements are written with ``?`` placeholders too, so every statement the
store runs goes through ``pg`` alike.
"""

from __future__ import annotations

import functools

import msgspec

from app.store.records import AccountRecord, GrantRecord, KeyRecord, UsageRollup

# Advisory lock keys (the two-int form; its key space is apart from the one-bigint form).
LOCK_CLASS = 0x5356_4300  # "SVC\0": every lock of this store
MIGRATION_LOCK = 0  # (LOCK_CLASS, 0) while a process migrates
USAGE_LOCK_CLASS = LOCK_CLASS + 1  # (USAGE_LOCK_CLASS, shard) while a shard's batch applies

# CREATE TABLE IF NOT EXISTS races in PostgreSQL too (a unique violation in the catalog),
# so even the first migration step runs under this lock.
LOCK_MIGRATIONS = f"SELECT pg_advisory_xact_lock({LOCK_CLASS}, {MIGRATION_LOCK})"
# Needs no cursor row, so the shard's first batch is covered too.
LOCK_SHARD = f"SELECT pg_advisory_xact_lock({USAGE_LOCK_CLASS}, ?::integer)"
# Key and webhook inserts of one account take turns, so seq grows with each key and a
# limit is counted by one at a time.
LOCK_ACCOUNT = "SELECT 1 FROM accounts WHERE pid = ? FOR NO KEY UPDATE"
# svc's schema is there (``Store.has_schema``), in the search path as the store uses it
SCHEMA_PRESENT = "SELECT 1 WHERE to_regclass('schema_migrations') IS NOT NULL"
# The first statement of a snapshot's transaction: every later read sees the same instant.
SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"

# Text columns of the records: sorting on them must not depend on the database collation.
_TEXT_COLUMNS = frozenset(
    field.name
    for record in (AccountRecord, KeyRecord, GrantRecord, UsageRollup)
    for field in msgspec.structs.fields(record)
    if field.type is str
)


@functools.cache  # the statements are a fixed set: each is converted once per process
def pg(query: str) -> str:
    """A shared statement in PostgreSQL's dialect: ``%s`` placeholders, byte-wise sorts
    (``COLLATE "C"``, as in SQLite, whatever the database's collation)."""
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
