"""The SQLite store: one connection per ``Store``, WAL mode, calls run in a worker thread.

Several processes (server workers, the CLI) share one file. Every write is a
``BEGIN IMMEDIATE`` transaction: it takes the write lock up front (waiting up to the busy
timeout), so two writers never deadlock upgrading read locks, and that one lock serializes
every write (so ``SQLStore`` needs no other lock here). A snapshot is a deferred ``BEGIN``:
in WAL mode it reads one snapshot of the file and does not block the writers.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from app.core.errors import StoreConflict, StoreError
from app.core.private_files import PRIVATE_FOLDER_MODE, create_private_file, make_private
from app.store.base import SQLStore
from app.store.program import Fetch, Program, Statement, Steps, Transaction

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
PAGE_CACHE_KIB = 256
"""Each connection's page cache (SQLite's default is 2,000 KiB). A worker's flusher filled
its 2 MB and kept it: its RSS stayed ~2 MB above the other worker's. The pages it reads
again come from the OS's cache; the flusher's CPU per event did not move."""
BEGIN = {
    Transaction.NONE: None,
    Transaction.WRITE: "BEGIN IMMEDIATE",
    Transaction.SNAPSHOT: "BEGIN",
}


class SQLiteStore(SQLStore):
    """``Store`` on a SQLite file; the file and its folder are created on first use."""

    SCHEMA_PRESENT = (
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    )

    def __init__(self, path: Path, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._lock = asyncio.Lock()

    async def has_schema(self) -> bool:
        # read only, on a connection of its own: the store's would create the file, or
        # switch a file that is not svc's to WAL
        if not self.path.is_file():
            return False
        return await asyncio.to_thread(self._read_schema)

    def _read_schema(self) -> bool:
        uri = self.path.resolve().as_uri() + "?mode=ro"
        try:
            with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
                return conn.execute(self.SCHEMA_PRESENT).fetchone() is not None
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite ({self.path}): {exc}") from exc

    async def _run(self, program: Program[T], transaction: Transaction = Transaction.NONE) -> T:
        return await self._call(partial(_drive, program=program, begin=BEGIN[transaction]))

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` on the connection in the worker thread, one call at a time."""
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

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                await asyncio.to_thread(conn.close)


def _drive(conn: sqlite3.Connection, program: Program[T], begin: str | None) -> T:
    """Run ``program`` on ``conn`` (in the worker thread), in a transaction unless
    ``begin`` is None."""
    if begin is None:
        return _steps(conn, program)
    conn.execute(begin)
    try:
        result = _steps(conn, program)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def _steps(conn: sqlite3.Connection, program: Program[T]) -> T:
    steps = Steps(program)
    for statement in steps:
        steps.answer(_answer(conn, statement))
    return steps.result


def _answer(conn: sqlite3.Connection, statement: Statement) -> Any:
    if statement.fetch is Fetch.EACH:
        conn.executemany(statement.query, statement.rows)
        return None
    cursor = conn.execute(statement.query, statement.args)
    if statement.fetch is Fetch.ROW:
        return cursor.fetchone()
    return cursor.fetchall() if statement.fetch is Fetch.ROWS else cursor.rowcount


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
        conn.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
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


async def _wait_out(job: asyncio.Future[Any]) -> None:
    """Wait for ``job`` to finish even if the waiting task is cancelled again."""
    while not job.done():
        try:
            await asyncio.wait([job])
        except asyncio.CancelledError:
            continue
    if not job.cancelled():
        job.exception()  # retrieved, so asyncio does not log it as never retrieved
