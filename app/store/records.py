"""Rows of the durable store, as typed records."""

from __future__ import annotations

import msgspec


class AccountRecord(msgspec.Struct, frozen=True, kw_only=True):
    pid: str
    created_at: int
    status: str = "active"


class KeyRecord(msgspec.Struct, frozen=True, kw_only=True):
    kid: str
    account_pid: str
    name: str
    environment: str
    daily_cap_credits: int | None
    secret_hash: str  # argon2id; the secret itself is never stored
    last4: str
    created_at: int
    status: str = "active"
    revoked_at: int | None = None


class GrantRecord(msgspec.Struct, frozen=True, kw_only=True):
    grant_id: str
    account_pid: str
    pool: str  # "purchased" | "earned"
    credits: int
    source: str  # "admin" | "spotlight" | "dev"
    reference: str | None
    created_at: int
    expires_at: int | None = None


class UsageRollup(msgspec.Struct, frozen=True, kw_only=True):
    account_pid: str
    kid: str
    day: str  # YYYY-MM-DD
    alias: str
    environment: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    credits: int
