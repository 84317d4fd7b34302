"""The PostgreSQL store: psycopg 3 with an async connection pool, opened on first use.

Every statement is the shared one in PostgreSQL's dialect (``postgres_sql.pg``: ``%s``
placeholders, byte-wise sorts). Connections run in autocommit; every write is one
explicit ``READ COMMITTED`` transaction. What SQLite's one write lock does is done here
with locks held to the end of the transaction, so they hold across processes: an advisory
lock for schema migrations and one per shard for usage batches (they need no row to exist
yet), and the account's row while its keys or webhooks are counted and added.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import psycopg
import psycopg.errors
from psycopg import AsyncConnection, IsolationLevel
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from app.core.errors import StoreConflict, StoreError
from app.store import postgres_sql as pgsql
from app.store.base import SQLStore
from app.store.program import Fetch, Program, Statement, Steps, Transaction
from app.store.records import Row

T = TypeVar("T")
Conn = AsyncConnection[Row]

MIN_CONNECTIONS = 1
MAX_CONNECTIONS = 10
CONNECT_TIMEOUT_S = 5.0  # libpq's connect_timeout for each new connection
POOL_TIMEOUT_S = 5.0  # longest wait for a pooled connection before StoreError


class PostgresStore(SQLStore):
    """``Store`` on a PostgreSQL database; the pool opens on first use.

    ``conninfo`` is a libpq URL (``postgresql://user:password@host:port/dbname``) or a
    ``key=value`` string. The password never appears in an error message.
    """

    MIGRATION_LOCK = pgsql.LOCK_MIGRATIONS
    SHARD_LOCK = pgsql.LOCK_SHARD
    ACCOUNT_LOCK = pgsql.LOCK_ACCOUNT
    SCHEMA_PRESENT = pgsql.SCHEMA_PRESENT

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

    async def _run(self, program: Program[T], transaction: Transaction = Transaction.NONE) -> T:
        try:
            pool = await self._get_pool()
            async with pool.connection() as conn:
                if transaction is Transaction.NONE:
                    return await _steps(conn, program)
                async with conn.transaction():
                    if transaction is Transaction.SNAPSHOT:
                        await conn.execute(pgsql.SNAPSHOT)
                    return await _steps(conn, program)
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

    async def close(self) -> None:
        async with self._opening:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


async def _configure(conn: Conn) -> None:
    # The lock-then-read steps need a fresh snapshot per statement, whatever the
    # server's default_transaction_isolation says.
    await conn.set_isolation_level(IsolationLevel.READ_COMMITTED)


async def _steps(conn: Conn, program: Program[T]) -> T:
    steps = Steps(program)
    for statement in steps:
        steps.answer(await _answer(conn, statement))
    return steps.result


async def _answer(conn: Conn, statement: Statement) -> Any:
    query = pgsql.pg(statement.query)
    if statement.fetch is Fetch.EACH:
        async with conn.cursor() as cursor:
            await cursor.executemany(query, statement.rows)
        return None
    done = await conn.execute(query, statement.args)
    if statement.fetch is Fetch.ROW:
        return await done.fetchone()
    return await done.fetchall() if statement.fetch is Fetch.ROWS else done.rowcount
