"""The SQLite store: one connection per process, WAL mode, calls run in a thread."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from app.store.base import StoreError
from app.store.records import AccountRecord, GrantRecord, KeyRecord, UsageRollup
from app.store.schema import (
    ACCOUNT_COLUMNS,
    CREATE_VERSIONS,
    CURSOR_UPSERT,
    GRANT_COLUMNS,
    KEY_COLUMNS,
    MIGRATIONS,
    USAGE_SUMS,
    USAGE_UPSERT,
    stream_id_key,
)

T = TypeVar("T")


class SQLiteStore:
    """``Store`` on a SQLite file. Several processes may share the file: writes take the
    lock up front (``BEGIN IMMEDIATE``) and wait up to five seconds for it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(
            path, check_same_thread=False, isolation_level=None, timeout=5.0
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._lock = asyncio.Lock()

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        async with self._lock:
            try:
                return await asyncio.to_thread(fn, self._conn)
            except sqlite3.OperationalError as exc:
                raise StoreError(f"sqlite: {exc}") from exc

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def tx(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

        return await self._call(tx)

    async def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return await self._call(lambda c: c.execute(sql, args).fetchall())

    async def migrate(self) -> None:
        def apply(conn: sqlite3.Connection) -> None:
            conn.execute(CREATE_VERSIONS)
            done = {v for (v,) in conn.execute("SELECT version FROM schema_migrations")}
            for version, statements in MIGRATIONS:
                if version in done:
                    continue
                for statement in statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (version, int(time.time())),
                )

        await self._write(apply)

    async def close(self) -> None:
        async with self._lock:
            self._conn.close()

    async def ping(self) -> None:
        await self._rows("SELECT 1")

    async def create_account(self, rec: AccountRecord) -> None:
        await self._write(
            lambda c: c.execute(
                f"INSERT INTO accounts ({ACCOUNT_COLUMNS}) VALUES (?, ?, ?)",
                (rec.pid, rec.created_at, rec.status),
            )
        )

    async def get_account(self, pid: str) -> AccountRecord | None:
        rows = await self._rows(f"SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE pid = ?", (pid,))
        return (
            AccountRecord(pid=rows[0][0], created_at=rows[0][1], status=rows[0][2])
            if rows
            else None
        )

    async def list_accounts(self) -> list[AccountRecord]:
        rows = await self._rows(f"SELECT {ACCOUNT_COLUMNS} FROM accounts ORDER BY created_at, pid")
        return [AccountRecord(pid=r[0], created_at=r[1], status=r[2]) for r in rows]

    async def insert_key(self, rec: KeyRecord) -> None:
        await self._write(
            lambda c: c.execute(
                f"INSERT INTO api_keys ({KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                _key_row(rec),
            )
        )

    async def get_key(self, kid: str) -> KeyRecord | None:
        rows = await self._rows(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE kid = ?", (kid,))
        return _key(rows[0]) if rows else None

    async def list_keys(self, account_pid: str) -> list[KeyRecord]:
        rows = await self._rows(
            f"SELECT {KEY_COLUMNS} FROM api_keys WHERE account_pid = ? "
            "ORDER BY created_at DESC, rowid DESC",
            (account_pid,),
        )
        return [_key(r) for r in rows]

    async def count_active_keys(self, account_pid: str) -> int:
        rows = await self._rows(
            "SELECT COUNT(*) FROM api_keys WHERE account_pid = ? AND status = 'active'",
            (account_pid,),
        )
        return int(rows[0][0])

    async def revoke_key(self, account_pid: str, kid: str, revoked_at: int) -> KeyRecord | None:
        def revoke(conn: sqlite3.Connection) -> KeyRecord | None:
            conn.execute(
                "UPDATE api_keys SET status = 'revoked', revoked_at = ? "
                "WHERE kid = ? AND account_pid = ? AND status = 'active'",
                (revoked_at, kid, account_pid),
            )
            rows = conn.execute(
                f"SELECT {KEY_COLUMNS} FROM api_keys WHERE kid = ? AND account_pid = ?",
                (kid, account_pid),
            ).fetchall()
            return _key(rows[0]) if rows else None

        return await self._write(revoke)

    async def insert_grant(self, rec: GrantRecord) -> bool:
        def insert(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                f"INSERT INTO credit_grants ({GRANT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (grant_id) DO NOTHING",
                (
                    rec.grant_id,
                    rec.account_pid,
                    rec.pool,
                    rec.credits,
                    rec.source,
                    rec.reference,
                    rec.created_at,
                    rec.expires_at,
                ),
            )
            return cur.rowcount == 1

        return await self._write(insert)

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        rows = await self._rows(
            f"SELECT {GRANT_COLUMNS} FROM credit_grants WHERE grant_id = ?", (grant_id,)
        )
        return _grant(rows[0]) if rows else None

    async def list_grants(self, account_pid: str) -> list[GrantRecord]:
        rows = await self._rows(
            f"SELECT {GRANT_COLUMNS} FROM credit_grants WHERE account_pid = ? "
            "ORDER BY created_at, rowid",
            (account_pid,),
        )
        return [_grant(r) for r in rows]

    async def apply_usage(
        self, shard: int, last_stream_id: str, rollups: list[UsageRollup]
    ) -> bool:
        def apply(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT last_id FROM flush_cursors WHERE shard = ?", (shard,)
            ).fetchone()
            if row is not None and stream_id_key(last_stream_id) <= stream_id_key(row[0]):
                return False
            conn.executemany(USAGE_UPSERT, [_usage_row(u) for u in rollups])
            conn.execute(CURSOR_UPSERT, (shard, last_stream_id, int(time.time())))
            return True

        return await self._write(apply)

    async def get_cursor(self, shard: int) -> str | None:
        rows = await self._rows("SELECT last_id FROM flush_cursors WHERE shard = ?", (shard,))
        return str(rows[0][0]) if rows else None

    async def usage_daily(
        self, account_pid: str, since_day: str, environment: str = "live"
    ) -> list[UsageRollup]:
        rows = await self._rows(
            f"SELECT day, {USAGE_SUMS} FROM usage_daily WHERE account_pid = ? AND day >= ? "
            "AND environment = ? GROUP BY day ORDER BY day DESC",
            (account_pid, since_day, environment),
        )
        return [_sums(account_pid, environment, r[0], r[1:]) for r in rows]

    async def usage_totals(self, account_pid: str, environment: str = "live") -> UsageRollup | None:
        rows = await self._rows(
            f"SELECT COUNT(*), {USAGE_SUMS} FROM usage_daily "
            "WHERE account_pid = ? AND environment = ?",
            (account_pid, environment),
        )
        if not rows or rows[0][0] == 0:
            return None
        return _sums(account_pid, environment, "", rows[0][1:])


def _key_row(rec: KeyRecord) -> tuple[Any, ...]:
    return (
        rec.kid,
        rec.account_pid,
        rec.name,
        rec.environment,
        rec.daily_cap_credits,
        rec.secret_hash,
        rec.last4,
        rec.created_at,
        rec.status,
        rec.revoked_at,
    )


def _key(row: tuple[Any, ...]) -> KeyRecord:
    return KeyRecord(
        kid=row[0],
        account_pid=row[1],
        name=row[2],
        environment=row[3],
        daily_cap_credits=row[4],
        secret_hash=row[5],
        last4=row[6],
        created_at=row[7],
        status=row[8],
        revoked_at=row[9],
    )


def _grant(row: tuple[Any, ...]) -> GrantRecord:
    return GrantRecord(
        grant_id=row[0],
        account_pid=row[1],
        pool=row[2],
        credits=row[3],
        source=row[4],
        reference=row[5],
        created_at=row[6],
        expires_at=row[7],
    )


def _usage_row(u: UsageRollup) -> tuple[Any, ...]:
    return (
        u.account_pid,
        u.kid,
        u.day,
        u.alias,
        u.environment,
        u.requests,
        u.prompt_tokens,
        u.completion_tokens,
        u.credits,
    )


def _sums(pid: str, environment: str, day: str, sums: tuple[Any, ...]) -> UsageRollup:
    return UsageRollup(
        account_pid=pid,
        kid="",
        day=day,
        alias="",
        environment=environment,
        requests=int(sums[0] or 0),
        prompt_tokens=int(sums[1] or 0),
        completion_tokens=int(sums[2] or 0),
        credits=int(sums[3] or 0),
    )
