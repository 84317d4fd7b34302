"""Rows of the durable store, as typed records.

Field names are the column names: the SQL in ``app.store.migrations`` is built from them.
"""

from __future__ import annotations

import msgspec


class AccountRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An account; balances live in Redis, the grants that fund them in ``credit_grants``."""

    pid: str  # public id "acct_…"
    created_at: int  # unix seconds
    status: str = "active"


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


class GrantRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Credits added to an account (a purchase, a spotlight reward, the dev bootstrap)."""

    grant_id: str  # idempotency id, unique
    account_pid: str
    pool: str  # "purchased" | "earned"
    credits: int
    source: str  # "admin" | "spotlight" | "dev"
    reference: str | None  # e.g. the spotlight view_id
    created_at: int
    expires_at: int | None = None


class UsageRollup(msgspec.Struct, frozen=True, kw_only=True):
    """Usage of one key on one UTC day through one alias; sums leave kid/alias/day empty."""

    account_pid: str
    kid: str
    day: str  # "YYYY-MM-DD"
    alias: str  # the alias that served
    environment: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    credits: int
