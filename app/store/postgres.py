"""The PostgreSQL store: psycopg 3 with an async connection pool, opened on first use.

The SQL is ``app.store.migrations``'s, converted once at import: ``?`` placeholders become
``%s``, and text sort keys sort byte-wise (``COLLATE "C"``) as in SQLite, whatever the
database's collation. Connections run in autocommit; every write is one explicit
``READ COMMITTED`` transaction. Two things are serialized with transaction-scoped advisory
locks, so they hold across processes and need no row to exist yet: schema migrations (one
lock) and usage batches (one lock per shard).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

import msgspec
import psycopg
import psycopg.errors
from psycopg import AsyncConnection, IsolationLevel
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from app.store import ANY_CURSOR, END_OF_TIME, StoreConflict, StoreError, stream_id_key
from app.store import postgres_sql as pgsql
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
Conn = AsyncConnection[Row]

MIN_CONNECTIONS = 1
MAX_CONNECTIONS = 10
CONNECT_TIMEOUT_S = 5.0  # libpq's connect_timeout for each new connection
POOL_TIMEOUT_S = 5.0  # longest wait for a pooled connection before StoreError


class PostgresStore:
    """``Store`` on a PostgreSQL database; the pool opens on first use.

    ``conninfo`` is a libpq URL (``postgresql://user:password@host:port/dbname``) or a
    ``key=value`` string. The password never appears in an error message.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        min_size: int = MIN_CONNECTIONS,
        max_size: int = MAX_CONNECTIONS,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        pool_timeout_s: float = POOL_TIMEOUT_S,
    ) -> None:
        try:
            params = conninfo_to_dict(conninfo)  # parsing only, no I/O
        except psycopg.Error:
            # libpq's message repeats the URL, password included.
            raise ValueError("invalid PostgreSQL URL (check its syntax and options)") from None
        ports = str(params.get("port") or "5432").split(",")
        if not all(p.strip().isdigit() for p in ports):
            raise ValueError("invalid PostgreSQL URL: the port is not a number")
        self._conninfo = conninfo
        self._password = str(params.get("password") or "")
        host, port, dbname = (params.get(k) for k in ("host", "port", "dbname"))
        # Where the store points, for messages: never the password.
        self.target = f"{host or 'local socket'}:{port or 5432}/{dbname or ''}"
        self.min_size, self.max_size = min_size, max_size
        self.connect_timeout_s = connect_timeout_s
        self.pool_timeout_s = pool_timeout_s
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._closed = False
        self._opening = asyncio.Lock()

    def __repr__(self) -> str:
        return f"PostgresStore({self.target!r})"

    # -- plumbing ---------------------------------------------------------------------

    async def _get_pool(self) -> AsyncConnectionPool[Conn]:
        if self._pool is not None:
            return self._pool
        async with self._opening:
            if self._closed:
                raise StoreError("the store is closed")
            if self._pool is None:
                pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
                    self._conninfo,
                    min_size=self.min_size,
                    max_size=self.max_size,
                    kwargs={
                        "autocommit": True,
                        "connect_timeout": max(1, round(self.connect_timeout_s)),
                    },
                    configure=_configure,
                    check=AsyncConnectionPool.check_connection,
                    timeout=self.pool_timeout_s,
                    name="svc-store",
                    open=False,
                )
                # wait=False: an unreachable server shows as a StoreError on each call,
                # while the pool keeps reconnecting in the background.
                await pool.open(wait=False)
                self._pool = pool
            return self._pool

    async def _run(self, fn: Callable[[Conn], Awaitable[T]], *, write: bool = False) -> T:
        try:
            pool = await self._get_pool()
            async with pool.connection() as conn:
                if not write:
                    return await fn(conn)
                async with conn.transaction():
                    return await fn(conn)
        except psycopg.errors.IntegrityError as exc:
            raise StoreConflict(self._message(exc)) from None
        except psycopg.errors.NumericValueOutOfRange as exc:
            # As in SQLite: a number that does not fit 64 bits is the caller's error.
            raise OverflowError(self._message(exc)) from None
        except psycopg.ProgrammingError as exc:
            if exc.sqlstate is None:
                raise  # misused by this code (bad bindings): a bug, not an unavailable store
            raise StoreError(self._message(exc)) from None
        except PoolTimeout as exc:
            raise StoreError(self._message(await self._why_no_connection(exc))) from None
        except psycopg.Error as exc:
            raise StoreError(self._message(exc)) from None

    async def _why_no_connection(self, waited: PoolTimeout) -> BaseException:
        """The pool only says it waited in vain; one direct attempt tells why."""
        try:
            conn = await AsyncConnection.connect(
                self._conninfo, connect_timeout=max(1, round(self.connect_timeout_s))
            )
        except psycopg.Error as exc:
            return exc
        await conn.close()
        return waited  # the server answers: every pooled connection was busy

    def _message(self, exc: BaseException) -> str:
        text = str(exc).strip() or type(exc).__name__
        if self._password:
            text = text.replace(self._password, "***")
        return f"postgresql ({self.target}): {text}"

    async def _write(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        return await self._run(fn, write=True)

    async def _rows(self, query: str, args: Row = ()) -> list[Row]:
        async def rows(conn: Conn) -> list[Row]:
            return await (await conn.execute(query, args)).fetchall()

        return await self._run(rows)

    async def _record(self, record: type[R], query: str, args: Row) -> R | None:
        rows = await self._rows(query, args)
        return to_record(record, rows[0]) if rows else None

    async def _records(self, record: type[R], query: str, args: Row = ()) -> list[R]:
        return [to_record(record, row) for row in await self._rows(query, args)]

    # -- lifecycle --------------------------------------------------------------------

    async def migrate(self) -> None:
        """Apply the migrations the database lacks, each in its own transaction under
        the migration lock, so processes starting at once apply each version once."""
        await self._run(_migrate)

    async def close(self) -> None:
        """Close the pool (idempotent); later calls raise ``StoreError``."""
        async with self._opening:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def ping(self) -> None:
        """One ``SELECT 1``; ``StoreError`` when the server cannot be reached."""
        await self._rows(pgsql.PING)

    # -- accounts ---------------------------------------------------------------------

    async def create_account(self, rec: AccountRecord) -> None:
        """Insert the account; ``StoreConflict`` when the pid exists."""
        await self._write(_execute(pgsql.INSERT_ACCOUNT, to_row(rec)))

    async def get_account(self, pid: str) -> AccountRecord | None:
        """The account, or None."""
        return await self._record(AccountRecord, pgsql.GET_ACCOUNT, (pid,))

    async def list_accounts(self) -> list[AccountRecord]:
        """Every account, oldest first."""
        return await self._records(AccountRecord, pgsql.LIST_ACCOUNTS)

    # -- keys -------------------------------------------------------------------------

    async def insert_key(self, rec: KeyRecord, *, max_active: int | None = None) -> bool:
        """Insert the key unless the account is at ``max_active`` active keys; the account
        row's lock makes the count and the insert one step for concurrent creates."""
        row = (*to_row(rec), rec.account_pid)  # the account again, for the seq subquery

        async def insert(conn: Conn) -> bool:
            await conn.execute(pgsql.LOCK_ACCOUNT, (rec.account_pid,))
            if max_active is not None:
                counted = await (
                    await conn.execute(pgsql.COUNT_ACTIVE_KEYS, (rec.account_pid, rec.created_at))
                ).fetchone()
                if counted is not None and int(counted[0]) >= max_active:
                    return False
            await conn.execute(pgsql.INSERT_KEY, row)
            return True

        return await self._write(insert)

    async def get_key(self, kid: str) -> KeyRecord | None:
        """The key, or None."""
        return await self._record(KeyRecord, pgsql.GET_KEY, (kid,))

    async def list_keys(self, account_pid: str) -> list[KeyRecord]:
        """The account's keys, revoked ones included, newest first."""
        return await self._records(KeyRecord, pgsql.LIST_KEYS, (account_pid,))

    async def count_active_keys(self, account_pid: str, now: int) -> int:
        """How many of the account's keys are active at ``now``."""
        rows = await self._rows(pgsql.COUNT_ACTIVE_KEYS, (account_pid, now))
        return int(rows[0][0])

    async def update_key(
        self, account_pid: str, kid: str, changes: Mapping[str, str | int | None]
    ) -> KeyRecord | None:
        """The key with ``changes`` (``KEY_UPDATABLE`` columns) set, in one transaction;
        None when that account has no such key."""

        async def update(conn: Conn) -> KeyRecord | None:
            for column, value in changes.items():
                await conn.execute(pgsql.UPDATE_KEY[column], (value, kid, account_pid))
            row = await (await conn.execute(pgsql.GET_ACCOUNT_KEY, (kid, account_pid))).fetchone()
            return None if row is None else to_record(KeyRecord, row)

        return await self._write(update)

    async def revoke_key(self, account_pid: str, kid: str, revoked_at: int) -> KeyRecord | None:
        """The key after revocation; None when that account has no such key."""

        async def revoke(conn: Conn) -> KeyRecord | None:
            await conn.execute(pgsql.REVOKE_KEY, (revoked_at, kid, account_pid))
            row = await (await conn.execute(pgsql.GET_ACCOUNT_KEY, (kid, account_pid))).fetchone()
            return None if row is None else to_record(KeyRecord, row)

        return await self._write(revoke)

    async def rotate_key(
        self, new: KeyRecord, old_expires_at: int, *, max_active: int | None = None
    ) -> KeyRotation:
        """See ``Store.rotate_key``; the account row's lock serializes rotations (and
        creates) of one account, so a key gets one successor."""
        old, pid, now = new.replaces, new.account_pid, new.created_at

        async def rotate(conn: Conn) -> KeyRotation:
            await conn.execute(pgsql.LOCK_ACCOUNT, (pid,))
            if await (await conn.execute(pgsql.ROTATABLE_KEY, (old, pid, now))).fetchone() is None:
                return KeyRotation.NOT_ACTIVE
            if await (await conn.execute(pgsql.KEY_SUCCESSOR, (pid, old))).fetchone() is not None:
                return KeyRotation.ROTATED_BEFORE
            if max_active is not None and old_expires_at > now:
                counted = await (await conn.execute(pgsql.COUNT_ACTIVE_KEYS, (pid, now))).fetchone()
                if counted is not None and int(counted[0]) >= max_active:
                    return KeyRotation.LIMIT_REACHED
            await conn.execute(pgsql.END_ROTATED_KEY, (old_expires_at, old, pid, old_expires_at))
            await conn.execute(pgsql.INSERT_KEY, (*to_row(new), pid))
            return KeyRotation.ROTATED

        return await self._write(rotate)

    # -- grants -----------------------------------------------------------------------

    async def insert_grant(self, rec: GrantRecord) -> bool:
        """True when written; False when the grant id exists (nothing changes)."""

        async def insert(conn: Conn) -> bool:
            return (await conn.execute(pgsql.INSERT_GRANT, to_row(rec))).rowcount == 1

        return await self._write(insert)

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        """The grant, or None."""
        return await self._record(GrantRecord, pgsql.GET_GRANT, (grant_id,))

    async def list_grants(self, account_pid: str) -> list[GrantRecord]:
        """The account's grants, oldest first."""
        return await self._records(GrantRecord, pgsql.LIST_GRANTS, (account_pid,))

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
        replayed batch.

        The shard's advisory lock makes concurrent calls take turns (it needs no cursor
        row, so the shard's first batch is covered too); under READ COMMITTED the cursor
        read after the lock sees what the previous holder committed.
        """
        position = stream_id_key(last_stream_id)  # a bad id fails before any I/O
        rows = [to_row(u) for u in rollups]
        expiry_rows = [to_row(e) for e in expiries]
        activity_rows = [to_row(a) for a in activity]

        async def apply(conn: Conn) -> bool:
            await conn.execute(pgsql.LOCK, (pgsql.USAGE_LOCK_CLASS, shard))
            cursor = await (await conn.execute(pgsql.GET_CURSOR, (shard,))).fetchone()
            if cursor is not None and position <= stream_id_key(cursor[0]):
                return False
            if after != ANY_CURSOR and (cursor[0] if cursor else None) != after:
                return False
            if rows:
                async with conn.cursor() as cur:
                    await cur.executemany(pgsql.UPSERT_USAGE, rows)
            if expiry_rows:
                async with conn.cursor() as cur:
                    await cur.executemany(pgsql.INSERT_EXPIRY, expiry_rows)
            if activity_rows:
                async with conn.cursor() as cur:
                    await cur.executemany(pgsql.INSERT_ACTIVITY, activity_rows)
            await _add_webhook_events(conn, webhook_events, int(time.time()))
            await conn.execute(pgsql.UPSERT_CURSOR, (shard, last_stream_id, int(time.time())))
            return True

        return await self._write(apply)

    # -- webhooks ---------------------------------------------------------------------

    async def set_low_balance(self, pid: str, low: int | None) -> None:
        """Set (None: clear) the account's low-balance threshold."""

        async def set_low(conn: Conn) -> None:
            await conn.execute(pgsql.SET_LOW_BALANCE, (low, pid))

        await self._write(set_low)

    async def create_webhook(self, rec: WebhookRecord, *, max_per_account: int) -> bool:
        """Add a webhook unless the account has ``max_per_account``: the account row's lock
        makes concurrent creates count in turn."""

        async def create(conn: Conn) -> bool:
            await conn.execute(pgsql.LOCK_ACCOUNT, (rec.account_pid,))
            row = await (await conn.execute(pgsql.COUNT_WEBHOOKS, (rec.account_pid,))).fetchone()
            if row is not None and int(row[0]) >= max_per_account:
                return False
            await conn.execute(pgsql.INSERT_WEBHOOK, to_row(rec))
            return True

        return await self._write(create)

    async def list_webhooks(self, account_pid: str) -> list[WebhookRecord]:
        """The account's webhooks, oldest first."""
        return await self._records(WebhookRecord, pgsql.LIST_WEBHOOKS, (account_pid,))

    async def get_webhook(self, account_pid: str, webhook_id: str) -> WebhookRecord | None:
        """The account's webhook (not deleted), or None."""
        return await self._record(WebhookRecord, pgsql.GET_WEBHOOK, (account_pid, webhook_id))

    async def update_webhook(
        self, account_pid: str, webhook_id: str, changes: Mapping[str, str]
    ) -> WebhookRecord | None:
        """The webhook with ``changes`` set, or None."""

        async def update(conn: Conn) -> WebhookRecord | None:
            for column, value in changes.items():
                await conn.execute(pgsql.UPDATE_WEBHOOK[column], (value, webhook_id, account_pid))
            cur = await conn.execute(pgsql.GET_WEBHOOK, (account_pid, webhook_id))
            row = await cur.fetchone()
            return None if row is None else to_record(WebhookRecord, row)

        return await self._write(update)

    async def delete_webhook(
        self, account_pid: str, webhook_id: str, deleted_at: int
    ) -> WebhookRecord | None:
        """Mark the webhook deleted; the record as it was, or None."""

        async def delete(conn: Conn) -> WebhookRecord | None:
            cur = await conn.execute(pgsql.GET_WEBHOOK, (account_pid, webhook_id))
            row = await cur.fetchone()
            if row is not None:
                await conn.execute(pgsql.DELETE_WEBHOOK, (deleted_at, webhook_id, account_pid))
            return None if row is None else to_record(WebhookRecord, row)

        return await self._write(delete)

    async def webhook_subscriptions(self) -> dict[str, set[str]]:
        """The event types each account's webhooks receive."""
        return subscriptions(await self._rows(pgsql.WEBHOOK_SUBSCRIPTIONS))

    async def add_webhook_events(self, events: Sequence[WebhookEventRecord], now: int) -> int:
        """Each event's deliveries, in one transaction; how many were added."""

        async def add(conn: Conn) -> int:
            return await _add_webhook_events(conn, events, now)

        return await self._write(add) if events else 0

    async def claim_deliveries(self, now: int, lease_until: int, limit: int) -> list[DueDelivery]:
        """Due deliveries, each taken until ``lease_until`` by the caller whose claim
        changed its row (a concurrent claimer's finds the lease taken)."""

        async def claim(conn: Conn) -> list[DueDelivery]:
            cur = await conn.execute(pgsql.DUE_DELIVERIES, (now, now, limit))
            taken = []
            for d in [due_delivery(r) for r in await cur.fetchall()]:
                key = (d.delivery.event_id, d.delivery.webhook_id)
                done = await conn.execute(pgsql.CLAIM_DELIVERY, (lease_until, *key, now))
                if done.rowcount:
                    taken.append(d)
            return taken

        return await self._write(claim)

    async def record_delivery(self, delivery: DeliveryRecord) -> None:
        """A delivery's state after an attempt."""

        async def record(conn: Conn) -> None:
            await conn.execute(pgsql.RECORD_DELIVERY, recorded_delivery(delivery))

        await self._write(record)

    async def list_deliveries(self, webhook_id: str, limit: int) -> list[DeliveryRecord]:
        """A webhook's most recent deliveries."""
        return await self._records(DeliveryRecord, pgsql.LIST_DELIVERIES, (webhook_id, limit))

    async def prune_deliveries(self, before: int, limit: int) -> int:
        """Delete up to ``limit`` deliveries of events before ``before``."""

        async def prune(conn: Conn) -> int:
            return (await conn.execute(pgsql.PRUNE_DELIVERIES, (before, limit))).rowcount

        return await self._write(prune)

    async def list_activity(self, query: ActivityQuery) -> list[ActivityRecord]:
        """One page of an account's activity, newest first."""
        return await self._records(ActivityRecord, *pgsql.activity_page(query))

    async def activity_position(self, account_pid: str, id: str) -> tuple[int, str] | None:
        """The page position of the account's newest row with response id ``id``."""
        rows = await self._rows(pgsql.ACTIVITY_POSITION, (account_pid, id))
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    async def prune_activity(self, before: int, limit: int) -> int:
        """Delete up to ``limit`` rows of the days before ``before``'s, in one transaction."""

        async def prune(conn: Conn) -> int:
            return (await conn.execute(pgsql.PRUNE_ACTIVITY, (before, limit))).rowcount

        return await self._write(prune)

    async def get_cursor(self, shard: int) -> str | None:
        """The last stream id applied for the shard, or None."""
        rows = await self._rows(pgsql.GET_CURSOR, (shard,))
        return str(rows[0][0]) if rows else None

    async def ledger_snapshot(self, since_day: str = END_OF_TIME) -> LedgerSnapshot:
        """Accounts, cursors and ledger sums from one REPEATABLE READ transaction."""

        async def read(conn: Conn) -> LedgerSnapshot:
            await conn.execute(pgsql.SNAPSHOT)
            accounts = [
                to_record(AccountRecord, row)
                for row in await (await conn.execute(pgsql.LIST_ACCOUNTS)).fetchall()
            ]
            results = [await (await conn.execute(q)).fetchall() for q in pgsql.SNAPSHOT_QUERIES]
            days = await (await conn.execute(pgsql.USAGE_DAYS_BY_ACCOUNT, (since_day,))).fetchall()
            return ledger_snapshot(accounts, *results, usage_days=days)

        return await self._write(read)  # _write: one explicit transaction

    async def list_all_keys(self) -> list[KeyRecord]:
        """Every key of every account."""
        return await self._records(KeyRecord, pgsql.LIST_ALL_KEYS)

    async def list_grants_since(self, since: int) -> list[GrantRecord]:
        """Grants created at or after ``since``, oldest first."""
        return await self._records(GrantRecord, pgsql.LIST_GRANTS_SINCE, (since,))

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
            rows = await self._rows(pgsql.USAGE_DAILY, (account_pid, since_day, environment))
            return [usage_sums(account_pid, environment, row[0], row[1:]) for row in rows]
        rows = await self._rows(
            pgsql.USAGE_DAILY_GROUPED[group_by], (account_pid, since_day, environment)
        )
        return [grouped_sums(account_pid, environment, group_by, row) for row in rows]

    async def usage_totals(
        self, account_pid: str, environment: str = "live", before_day: str = END_OF_TIME
    ) -> UsageRollup | None:
        """Sums of the days before ``before_day`` (all time by default), or None when
        there is no such usage."""
        rows = await self._rows(pgsql.USAGE_TOTALS, (account_pid, environment, before_day))
        if not rows or rows[0][0] == 0:
            return None
        return usage_sums(account_pid, environment, "", rows[0][1:])

    async def last_usage_day(self) -> str | None:
        """The latest day any rollup covers, or None."""
        rows = await self._rows(pgsql.LAST_USAGE_DAY)
        return str(rows[0][0]) if rows and rows[0][0] is not None else None


async def _configure(conn: Conn) -> None:
    # The lock-then-read steps need a fresh snapshot per statement, whatever the
    # server's default_transaction_isolation says.
    await conn.set_isolation_level(IsolationLevel.READ_COMMITTED)


def _execute(query: str, args: Row) -> Callable[[Conn], Awaitable[None]]:
    async def execute(conn: Conn) -> None:
        await conn.execute(query, args)

    return execute


async def _migrate(conn: Conn) -> None:
    # CREATE TABLE IF NOT EXISTS races in PostgreSQL too (a unique violation in the
    # catalog), so even this runs under the lock.
    async with conn.transaction():
        await conn.execute(pgsql.LOCK, (pgsql.LOCK_CLASS, pgsql.MIGRATION_LOCK))
        await conn.execute(pgsql.CREATE_SCHEMA_MIGRATIONS)
    for version, statements in pgsql.MIGRATIONS:
        async with conn.transaction():
            await conn.execute(pgsql.LOCK, (pgsql.LOCK_CLASS, pgsql.MIGRATION_LOCK))
            await _apply_migration(conn, version, statements)


async def _apply_migration(conn: Conn, version: int, statements: Sequence[str]) -> None:
    # Checked under the lock: of several processes migrating at once, the first applies
    # the version and the others find it recorded.
    if await (await conn.execute(pgsql.MIGRATION_APPLIED, (version,))).fetchone() is not None:
        return
    for statement in statements:
        await conn.execute(statement)
    await conn.execute(pgsql.RECORD_MIGRATION, (version, int(time.time())))


async def _add_webhook_events(conn: Conn, events: Sequence[WebhookEventRecord], now: int) -> int:
    """Each event's deliveries (``Store.add_webhook_events``), in the caller's transaction."""
    added = 0
    for event in events:
        cur = await conn.execute(pgsql.ACCOUNT_WEBHOOK_EVENTS, (event.account_pid,))
        for delivery in deliveries_of(event, await cur.fetchall(), now):
            added += (await conn.execute(pgsql.INSERT_DELIVERY, to_row(delivery))).rowcount
    return added
