"""Versioned schema migrations and the SQL every driver shares.

Statements use ``?`` placeholders; a driver with another paramstyle translates them.
The SQL itself sticks to what SQLite and PostgreSQL both accept.
"""

from __future__ import annotations

MIGRATIONS: list[tuple[int, list[str]]] = [
    (
        1,
        [
            """CREATE TABLE accounts (
                pid TEXT PRIMARY KEY,
                created_at BIGINT NOT NULL,
                status TEXT NOT NULL DEFAULT 'active'
            )""",
            """CREATE TABLE api_keys (
                kid TEXT PRIMARY KEY,
                account_pid TEXT NOT NULL REFERENCES accounts(pid),
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
                account_pid TEXT NOT NULL REFERENCES accounts(pid),
                pool TEXT NOT NULL,
                credits BIGINT NOT NULL,
                source TEXT NOT NULL,
                reference TEXT,
                created_at BIGINT NOT NULL,
                expires_at BIGINT
            )""",
            "CREATE INDEX credit_grants_account ON credit_grants (account_pid, created_at)",
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
        ],
    ),
]

CREATE_VERSIONS = (
    "CREATE TABLE IF NOT EXISTS schema_migrations "
    "(version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)"
)
ACCOUNT_COLUMNS = "pid, created_at, status"
KEY_COLUMNS = (
    "kid, account_pid, name, environment, daily_cap_credits, secret_hash, last4, "
    "created_at, status, revoked_at"
)
GRANT_COLUMNS = "grant_id, account_pid, pool, credits, source, reference, created_at, expires_at"
USAGE_UPSERT = (
    "INSERT INTO usage_daily (account_pid, kid, day, alias, environment, requests, "
    "prompt_tokens, completion_tokens, credits) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (account_pid, kid, day, alias, environment) DO UPDATE SET "
    "requests = usage_daily.requests + excluded.requests, "
    "prompt_tokens = usage_daily.prompt_tokens + excluded.prompt_tokens, "
    "completion_tokens = usage_daily.completion_tokens + excluded.completion_tokens, "
    "credits = usage_daily.credits + excluded.credits"
)
CURSOR_UPSERT = (
    "INSERT INTO flush_cursors (shard, last_id, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT (shard) DO UPDATE SET last_id = excluded.last_id, "
    "updated_at = excluded.updated_at"
)
USAGE_SUMS = "SUM(requests), SUM(prompt_tokens), SUM(completion_tokens), SUM(credits)"


def stream_id_key(stream_id: str) -> tuple[int, int]:
    """A Redis stream id (``ms-seq``) as a tuple that orders like the stream."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)
