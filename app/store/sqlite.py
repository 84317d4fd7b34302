"""The SQLite store: one connection per ``Store``, WAL mode, calls run in a worker thread.

Several processes (server workers, the CLI) share one file. Every write is a
``BEGIN IMMEDIATE`` transaction: it takes the write lock up front (waiting up to the busy
timeout), so two writers never deadlock upgrading read locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from app.core.private_files import PRIVATE_FOLDER_MODE, create_private_file, make_private
from app.store import ANY_CURSOR, END_OF_TIME, StoreConflict, StoreError, stream_id_key
from app.store import migrations as sql
from app.store.records import (
    AccountRecord,
    ActivityQuery,
    ActivityRecord,
    CreditExpiry,
    DeliveryRecord,
    DueDelivery,
    GrantRecord,
    KeyRecord,
    KeyRotation,
    LedgerSnapshot,
    Row,
    UsageRollup,
    WebhookEventRecord,
    WebhookRecord,
    deliveries_of,
    due_delivery,
    grouped_sums,
    ledger_snapshot,
    recorded_delivery,
    subscriptions,
    to_record,
    to_row,
    usage_sums,
)

T = TypeVar("T")
R = TypeVar("R", bound=msgspec.Struct)

BUSY_TIMEOUT_MS = 5000


class SQLiteStore:
    """``Store`` on a SQLite file; the file and its folder are created on first use."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._lock = asyncio.Lock()

    # -- plumbing ---------------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        async with self._lock:
            job = asyncio.ensure_future(asyncio.to_thread(self._in_thread, fn))
            try:
                return await asyncio.shield(job)
            except asyncio.CancelledError:
                # A running thread cannot be stopped: hold the lock until it is done, or
                # the next call would share the connection in the middle of a transaction.
                await _wait_out(job)
                raise

    def _in_thread(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return fn(self._connection())
        except sqlite3.IntegrityError as exc:
            raise StoreConflict(f"sqlite: {exc}") from exc
        except sqlite3.ProgrammingError:
            raise  # bad SQL or bindings are bugs, not an unavailable store
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"sqlite ({self.path}): {exc}") from exc

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            if self._closed:
                raise StoreError("the store is closed")
            self._conn = _connect(self.path, self.busy_timeout_ms)
        return self._conn

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._run(lambda conn: _transaction(conn, fn))

    async def _rows(self, query: str, args: Row = ()) -> list[Row]:
        return await self._run(lambda conn: conn.execute(query, args).fetchall())

    async def _record(self, record: type[R], query: str, args: Row) -> R | None:
        rows = await self._rows(query, args)
        return to_record(record, rows[0]) if rows else None

    async def _records(self, record: type[R], query: str, args: Row = ()) -> list[R]:
        return [to_record(record, row) for row in await self._rows(query, args)]

    # -- lifecycle --------------------------------------------------------------------

    async def migrate(self) -> None:
        """Apply the migrations this file lacks, each in its own write transaction."""
        await self._run(_migrate)

    async def close(self) -> None:
        """Close the connection (idempotent); later calls raise ``StoreError``."""
        async with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                await asyncio.to_thread(conn.close)

    async def ping(self) -> None:
        """One ``SELECT 1``; ``StoreError`` when the file cannot be opened or read."""
        await self._rows(sql.PING)

    # -- accounts ---------------------------------------------------------------------

    async def create_account(self, rec: AccountRecord) -> None:
        """Insert the account; ``StoreConflict`` when the pid exists."""
        await self._write(lambda conn: conn.execute(sql.INSERT_ACCOUNT, to_row(rec)))

    async def get_account(self, pid: str) -> AccountRecord | None:
        """The account, or None."""
        return await self._record(AccountRecord, sql.GET_ACCOUNT, (pid,))

    async def list_accounts(self) -> list[AccountRecord]:
        """Every account, oldest first."""
        return await self._records(AccountRecord, sql.LIST_ACCOUNTS)

    # -- keys -------------------------------------------------------------------------

    async def insert_key(self, rec: KeyRecord, *, max_active: int | None = None) -> bool:
        """Insert the key unless the account is at ``max_active`` active keys (the write
        lock makes the count and the insert one step); ``StoreConflict`` as documented."""
        row = (*to_row(rec), rec.account_pid)  # the account again, for the seq subquery

        def insert(conn: sqlite3.Connection) -> bool:
            if max_active is not None:
                (active,) = conn.execute(
                    sql.COUNT_ACTIVE_KEYS, (rec.account_pid, rec.created_at)
                ).fetchone()
                if active >= max_active:
                    return False
            conn.execute(sql.INSERT_KEY, row)
            return True

        return await self._write(insert)

    async def get_key(self, kid: str) -> KeyRecord | None:
        """The key, or None."""
        return await self._record(KeyRecord, sql.GET_KEY, (kid,))

    async def list_keys(self, account_pid: str) -> list[KeyRecord]:
        """The account's keys, revoked ones included, newest first."""
        return await self._records(KeyRecord, sql.LIST_KEYS, (account_pid,))

    async def count_active_keys(self, account_pid: str, now: int) -> int:
        """How many of the account's keys are active at ``now``."""
        rows = await self._rows(sql.COUNT_ACTIVE_KEYS, (account_pid, now))
        return int(rows[0][0])

    async def update_key(
        self, account_pid: str, kid: str, changes: Mapping[str, str | int | None]
    ) -> KeyRecord | None:
        """The key with ``changes`` (``KEY_UPDATABLE`` columns) set, in one transaction;
        None when that account has no such key."""

        def update(conn: sqlite3.Connection) -> KeyRecord | None:
            for column, value in changes.items():
                conn.execute(sql.UPDATE_KEY[column], (value, kid, account_pid))
            row = conn.execute(sql.GET_ACCOUNT_KEY, (kid, account_pid)).fetchone()
            return None if row is None else to_record(KeyRecord, row)

        return await self._write(update)

    async def revoke_key(self, account_pid: str, kid: str, revoked_at: int) -> KeyRecord | None:
        """The key after revocation; None when that account has no such key."""

        def revoke(conn: sqlite3.Connection) -> KeyRecord | None:
            conn.execute(sql.REVOKE_KEY, (revoked_at, kid, account_pid))
            row = conn.execute(sql.GET_ACCOUNT_KEY, (kid, account_pid)).fetchone()
            return None if row is None else to_record(KeyRecord, row)

        return await self._write(revoke)

    async def rotate_key(
        self, new: KeyRecord, old_expires_at: int, *, max_active: int | None = None
    ) -> KeyRotation:
        """See ``Store.rotate_key``; the write lock makes the checks and writes one step."""
        old, pid, now = new.replaces, new.account_pid, new.created_at

        def rotate(conn: sqlite3.Connection) -> KeyRotation:
            if conn.execute(sql.ROTATABLE_KEY, (old, pid, now)).fetchone() is None:
                return KeyRotation.NOT_ACTIVE
            if conn.execute(sql.KEY_SUCCESSOR, (pid, old)).fetchone() is not None:
                return KeyRotation.ROTATED_BEFORE
            if max_active is not None and old_expires_at > now:
                (active,) = conn.execute(sql.COUNT_ACTIVE_KEYS, (pid, now)).fetchone()
                if active >= max_active:
                    return KeyRotation.LIMIT_REACHED
            conn.execute(sql.END_ROTATED_KEY, (old_expires_at, old, pid, old_expires_at))
            conn.execute(sql.INSERT_KEY, (*to_row(new), pid))
            return KeyRotation.ROTATED

        return await self._write(rotate)

    # -- grants -----------------------------------------------------------------------

    async def insert_grant(self, rec: GrantRecord) -> bool:
        """True when written; False when the grant id exists (nothing changes)."""
        return await self._write(
            lambda conn: conn.execute(sql.INSERT_GRANT, to_row(rec)).rowcount == 1
        )

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        """The grant, or None."""
        return await self._record(GrantRecord, sql.GET_GRANT, (grant_id,))

    async def list_grants(self, account_pid: str) -> list[GrantRecord]:
        """The account's grants, oldest first."""
        return await self._records(GrantRecord, sql.LIST_GRANTS, (account_pid,))

    # -- usage ------------------------------------------------------------------------

    async def apply_usage(
        self,
        shard: int,
        last_stream_id: str,
        rollups: list[UsageRollup],
        *,
        after: str | None = ANY_CURSOR,
        expiries: Sequence[CreditExpiry] = (),
        activity: Sequence[ActivityRecord] = (),
        webhook_events: Sequence[WebhookEventRecord] = (),
    ) -> bool:
        """Add the rollups and expiries and move the cursor atomically; False for a
        replayed batch."""
        position = stream_id_key(last_stream_id)  # a bad id fails before any I/O
        rows = [to_row(u) for u in rollups]
        expiry_rows = [to_row(e) for e in expiries]
        activity_rows = [to_row(a) for a in activity]

        def apply(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(sql.GET_CURSOR, (shard,)).fetchone()
            if cursor is not None and position <= stream_id_key(cursor[0]):
                return False
            if after != ANY_CURSOR and (cursor[0] if cursor else None) != after:
                return False
            conn.executemany(sql.UPSERT_USAGE, rows)
            conn.executemany(sql.INSERT_EXPIRY, expiry_rows)
            conn.executemany(sql.INSERT_ACTIVITY, activity_rows)
            _add_webhook_events(conn, webhook_events, int(time.time()))
            conn.execute(sql.UPSERT_CURSOR, (shard, last_stream_id, int(time.time())))
            return True

        return await self._write(apply)

    async def get_cursor(self, shard: int) -> str | None:
        """The last stream id applied for the shard, or None."""
        rows = await self._rows(sql.GET_CURSOR, (shard,))
        return str(rows[0][0]) if rows else None

    # -- webhooks ---------------------------------------------------------------------

    async def set_low_balance(self, pid: str, low: int | None) -> None:
        """Set (None: clear) the account's low-balance threshold."""
        await self._write(lambda conn: conn.execute(sql.SET_LOW_BALANCE, (low, pid)))

    async def create_webhook(self, rec: WebhookRecord, *, max_per_account: int) -> bool:
        """Add a webhook unless the account has ``max_per_account`` (one transaction)."""

        def create(conn: sqlite3.Connection) -> bool:
            (count,) = conn.execute(sql.COUNT_WEBHOOKS, (rec.account_pid,)).fetchone()
            if count >= max_per_account:
                return False
            conn.execute(sql.INSERT_WEBHOOK, to_row(rec))
            return True

        return await self._write(create)

    async def list_webhooks(self, account_pid: str) -> list[WebhookRecord]:
        """The account's webhooks, oldest first."""
        return await self._records(WebhookRecord, sql.LIST_WEBHOOKS, (account_pid,))

    async def get_webhook(self, account_pid: str, webhook_id: str) -> WebhookRecord | None:
        """The account's webhook (not deleted), or None."""
        return await self._record(WebhookRecord, sql.GET_WEBHOOK, (account_pid, webhook_id))

    async def update_webhook(
        self, account_pid: str, webhook_id: str, changes: Mapping[str, str]
    ) -> WebhookRecord | None:
        """The webhook with ``changes`` set, or None."""

        def update(conn: sqlite3.Connection) -> WebhookRecord | None:
            for column, value in changes.items():
                conn.execute(sql.UPDATE_WEBHOOK[column], (value, webhook_id, account_pid))
            row = conn.execute(sql.GET_WEBHOOK, (account_pid, webhook_id)).fetchone()
            return None if row is None else to_record(WebhookRecord, row)

        return await self._write(update)

    async def delete_webhook(
        self, account_pid: str, webhook_id: str, deleted_at: int
    ) -> WebhookRecord | None:
        """Mark the webhook deleted; the record as it was, or None."""

        def delete(conn: sqlite3.Connection) -> WebhookRecord | None:
            row = conn.execute(sql.GET_WEBHOOK, (account_pid, webhook_id)).fetchone()
            if row is not None:
                conn.execute(sql.DELETE_WEBHOOK, (deleted_at, webhook_id, account_pid))
            return None if row is None else to_record(WebhookRecord, row)

        return await self._write(delete)

    async def webhook_subscriptions(self) -> dict[str, set[str]]:
        """The event types each account's webhooks receive."""
        return subscriptions(await self._rows(sql.WEBHOOK_SUBSCRIPTIONS))

    async def add_webhook_events(self, events: Sequence[WebhookEventRecord], now: int) -> int:
        """Each event's deliveries, in one transaction; how many were added."""

        return await self._write(partial(_add_webhook_events, events=events, now=now))

    async def claim_deliveries(self, now: int, lease_until: int, limit: int) -> list[DueDelivery]:
        """Due deliveries, each taken until ``lease_until`` (the write lock: one taker)."""

        def claim(conn: sqlite3.Connection) -> list[DueDelivery]:
            due = [due_delivery(r) for r in conn.execute(sql.DUE_DELIVERIES, (now, now, limit))]
            for d in due:
                key = (d.delivery.event_id, d.delivery.webhook_id)
                conn.execute(sql.CLAIM_DELIVERY, (lease_until, *key, now))
            return due

        return await self._write(claim)

    async def record_delivery(self, delivery: DeliveryRecord) -> None:
        """A delivery's state after an attempt."""
        await self._write(
            lambda conn: conn.execute(sql.RECORD_DELIVERY, recorded_delivery(delivery))
        )

    async def list_deliveries(self, webhook_id: str, limit: int) -> list[DeliveryRecord]:
        """A webhook's most recent deliveries."""
        return await self._records(DeliveryRecord, sql.LIST_DELIVERIES, (webhook_id, limit))

    async def prune_deliveries(self, before: int, limit: int) -> int:
        """Delete up to ``limit`` deliveries of events before ``before``."""
        return await self._write(
            lambda conn: conn.execute(sql.PRUNE_DELIVERIES, (before, limit)).rowcount
        )

    async def list_activity(self, query: ActivityQuery) -> list[ActivityRecord]:
        """One page of an account's activity, newest first."""
        return await self._records(ActivityRecord, *sql.activity_page(query))

    async def activity_position(self, account_pid: str, id: str) -> tuple[int, str] | None:
        """The page position of the account's newest row with response id ``id``."""
        rows = await self._rows(sql.ACTIVITY_POSITION, (account_pid, id))
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    async def prune_activity(self, before: int, limit: int) -> int:
        """Delete up to ``limit`` rows of the days before ``before``'s, in one transaction."""
        return await self._write(
            lambda conn: conn.execute(sql.PRUNE_ACTIVITY, (before, limit)).rowcount
        )

    async def ledger_snapshot(self, since_day: str = END_OF_TIME) -> LedgerSnapshot:
        """Accounts, cursors and ledger sums from one read transaction: in WAL mode it
        reads one snapshot of the file, and it does not block the writers."""

        def read(conn: sqlite3.Connection) -> LedgerSnapshot:
            conn.execute("BEGIN")
            try:
                accounts = [
                    to_record(AccountRecord, row)
                    for row in conn.execute(sql.LIST_ACCOUNTS).fetchall()
                ]
                return ledger_snapshot(
                    accounts,
                    *(
                        conn.execute(query).fetchall()
                        for query in (
                            sql.LIST_CURSORS,
                            sql.GRANT_TOTALS,
                            sql.USAGE_BY_ACCOUNT,
                            sql.EXPIRY_TOTALS,
                        )
                    ),
                    usage_days=conn.execute(sql.USAGE_DAYS_BY_ACCOUNT, (since_day,)).fetchall(),
                )
            finally:
                conn.execute("COMMIT")

        return await self._run(read)

    async def list_all_keys(self) -> list[KeyRecord]:
        """Every key of every account."""
        return await self._records(KeyRecord, sql.LIST_ALL_KEYS)

    async def list_grants_since(self, since: int) -> list[GrantRecord]:
        """Grants created at or after ``since``, oldest first."""
        return await self._records(GrantRecord, sql.LIST_GRANTS_SINCE, (since,))

    async def usage_daily(
        self,
        account_pid: str,
        since_day: str,
        environment: str = "live",
        *,
        group_by: str | None = None,
    ) -> list[UsageRollup]:
        """Per-day sums from ``since_day`` on, newest first; per day and ``group_by``."""
        if group_by is None:
            rows = await self._rows(sql.USAGE_DAILY, (account_pid, since_day, environment))
            return [usage_sums(account_pid, environment, row[0], row[1:]) for row in rows]
        rows = await self._rows(
            sql.USAGE_DAILY_GROUPED[group_by], (account_pid, since_day, environment)
        )
        return [grouped_sums(account_pid, environment, group_by, row) for row in rows]

    async def usage_totals(
        self, account_pid: str, environment: str = "live", before_day: str = END_OF_TIME
    ) -> UsageRollup | None:
        """Sums of the days before ``before_day`` (all time by default), or None when
        there is no such usage."""
        rows = await self._rows(sql.USAGE_TOTALS, (account_pid, environment, before_day))
        if not rows or rows[0][0] == 0:
            return None
        return usage_sums(account_pid, environment, "", rows[0][1:])

    async def last_usage_day(self) -> str | None:
        """The latest day any rollup covers, or None."""
        rows = await self._rows(sql.LAST_USAGE_DAY)
        return str(rows[0][0]) if rows and rows[0][0] is not None else None


# SQLite gives the files beside the database the database file's mode when it creates
# them; ones left from before svc made the database private are tightened here.
SIDE_FILE_SUFFIXES = ("-wal", "-shm", "-journal")


def _make_files_private(path: Path) -> None:
    """The database file (it holds key hashes and accounts) and its side files: 0600.
    A folder made here is 0700; an existing one is the operator's (it may be the current
    directory) and stays as it is."""
    path.parent.mkdir(mode=PRIVATE_FOLDER_MODE, parents=True, exist_ok=True)
    create_private_file(path)
    make_private(path)
    for suffix in SIDE_FILE_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):  # the last connection removed it
            make_private(path.with_name(path.name + suffix))


def _connect(path: Path, busy_timeout_ms: int) -> sqlite3.Connection:
    _make_files_private(path)
    # isolation_level=None: no implicit transactions, every write says BEGIN IMMEDIATE.
    conn = sqlite3.connect(
        path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        _enable_wal(conn, busy_timeout_ms)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _enable_wal(conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
    # Switching a fresh file to WAL takes an exclusive lock and SQLite answers BUSY
    # without calling the busy handler, so processes opening a new file at once retry.
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(0.005)


def _add_webhook_events(
    conn: sqlite3.Connection, events: Sequence[WebhookEventRecord], now: int
) -> int:
    """Each event's deliveries (``Store.add_webhook_events``), in the caller's transaction."""
    added = 0
    for event in events:
        webhooks = conn.execute(sql.ACCOUNT_WEBHOOK_EVENTS, (event.account_pid,)).fetchall()
        for delivery in deliveries_of(event, webhooks, now):
            added += conn.execute(sql.INSERT_DELIVERY, to_row(delivery)).rowcount
    return added


def _transaction(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def _migrate(conn: sqlite3.Connection) -> None:
    _transaction(conn, lambda c: c.execute(sql.CREATE_SCHEMA_MIGRATIONS))
    for version, statements in sql.MIGRATIONS:
        _transaction(conn, partial(_apply_migration, version=version, statements=statements))


def _apply_migration(conn: sqlite3.Connection, version: int, statements: Sequence[str]) -> None:
    # Checked under the write lock: of several processes migrating at once, the first
    # applies the version and the others find it recorded.
    if conn.execute(sql.MIGRATION_APPLIED, (version,)).fetchone() is not None:
        return
    for statement in statements:
        conn.execute(statement)
    conn.execute(sql.RECORD_MIGRATION, (version, int(time.time())))


async def _wait_out(job: asyncio.Future[Any]) -> None:
    """Wait for ``job`` to finish even if the waiting task is cancelled again."""
    while not job.done():
        try:
            await asyncio.wait([job])
        except asyncio.CancelledError:
            continue
    if not job.cancelled():
        job.exception()  # retrieved, so asyncio does not log it as never retrieved
