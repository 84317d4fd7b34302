"""The durable store's interface."""

from __future__ import annotations

from typing import Protocol

from app.store.records import AccountRecord, GrantRecord, KeyRecord, UsageRollup


class StoreError(Exception):
    """The durable store failed or cannot be reached."""


class Store(Protocol):
    """What svc keeps outside Redis: accounts, keys, grants, usage rollups, flush cursors."""

    async def migrate(self) -> None:
        """Create or upgrade the schema; idempotent and safe from several processes."""

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """A cheap round trip; raises ``StoreError`` when the store is unreachable."""

    async def create_account(self, rec: AccountRecord) -> None: ...

    async def get_account(self, pid: str) -> AccountRecord | None: ...

    async def list_accounts(self) -> list[AccountRecord]: ...

    async def insert_key(self, rec: KeyRecord) -> None: ...

    async def get_key(self, kid: str) -> KeyRecord | None: ...

    async def list_keys(self, account_pid: str) -> list[KeyRecord]:
        """Newest first."""

    async def count_active_keys(self, account_pid: str) -> int: ...

    async def revoke_key(self, account_pid: str, kid: str, revoked_at: int) -> KeyRecord | None:
        """The revoked key; None when the account has no such key. Idempotent."""

    async def insert_grant(self, rec: GrantRecord) -> bool:
        """False (and nothing written) when the grant id exists already."""

    async def get_grant(self, grant_id: str) -> GrantRecord | None: ...

    async def list_grants(self, account_pid: str) -> list[GrantRecord]:
        """Oldest first."""

    async def apply_usage(
        self, shard: int, last_stream_id: str, rollups: list[UsageRollup]
    ) -> bool:
        """Add rollups and move the shard's cursor in one transaction; False (nothing
        written) when ``last_stream_id`` is at or below the cursor already."""

    async def get_cursor(self, shard: int) -> str | None: ...

    async def usage_daily(
        self, account_pid: str, since_day: str, environment: str = "live"
    ) -> list[UsageRollup]:
        """Per-day sums (kid and alias empty) from ``since_day`` on, newest first."""

    async def usage_totals(self, account_pid: str, environment: str = "live") -> UsageRollup | None:
        """All-time sums; None when the account has no usage."""
