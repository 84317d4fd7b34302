"""What only the SQLite store has: files and folders, WAL, pragmas, the write lock, the
worker thread, ``sqlite:`` URLs. The store contract itself is tested on every driver in
``test_store.py``."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.core.errors import StoreError
from app.store import AccountRecord, UsageRollup, open_store
from app.store.migrations import MIGRATIONS
from app.store.sqlite import SQLiteStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "svc.db")
    await s.migrate()
    yield s
    await s.close()


def _use(day: str, credits: int, *, kid: str) -> UsageRollup:
    return UsageRollup(
        account_pid="acct_A",
        kid=kid,
        day=day,
        alias="svc-fast",
        environment="live",
        api="chat",
        requests=1,
        prompt_tokens=10,
        completion_tokens=20,
        credits=credits,
    )


def _sql(path: Path, query: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


# -- files, WAL, processes ------------------------------------------------------------


async def test_two_stores_migrate_a_file_in_new_folders_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "there" / "svc.db"
    first, second = SQLiteStore(path), SQLiteStore(path)
    await asyncio.gather(first.migrate(), second.migrate(), first.migrate())
    await first.create_account(AccountRecord(pid="acct_A", created_at=1))
    assert await second.get_account("acct_A") is not None
    await asyncio.gather(first.close(), second.close())
    assert _sql(path, "SELECT COUNT(*) FROM schema_migrations") == [(len(MIGRATIONS),)]


async def test_stores_opening_a_fresh_file_at_once_all_switch_to_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Switching a new file to WAL answers BUSY without waiting for the busy timeout; line
    # the stores up right before that switch so the race happens, and the store retries.
    real_connect, opened = sqlite3.connect, threading.Barrier(4)

    def connect_then_line_up(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real_connect(*args, **kwargs)
        opened.wait(timeout=10)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect_then_line_up)
    for round_ in range(20):
        stores = [SQLiteStore(tmp_path / f"r{round_}.db") for _ in range(4)]
        await asyncio.gather(*(s.ping() for s in stores))
        await asyncio.gather(*(s.close() for s in stores))


def _flush_in_process(url: str, shard: int) -> None:
    async def flush() -> None:
        s = open_store(url)
        await s.migrate()
        for n in range(1, 21):
            batch = [_use("2026-01-01", 3, kid=f"k{shard}")]
            assert await s.apply_usage(shard, f"{n}-0", batch)
            assert not await s.apply_usage(shard, f"{n}-0", batch)  # a replay
        await s.close()

    asyncio.run(flush())


async def test_processes_share_a_fresh_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'svc.db'}"
    spawn = multiprocessing.get_context("spawn")
    procs = [spawn.Process(target=_flush_in_process, args=(url, shard)) for shard in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        await asyncio.to_thread(proc.join, 60)
    assert [proc.exitcode for proc in procs] == [0, 0, 0]
    s = open_store(url)
    totals = await s.usage_totals("acct_A")
    assert totals is not None
    assert (totals.requests, totals.credits) == (60, 180)
    assert [await s.get_cursor(shard) for shard in range(3)] == ["20-0"] * 3
    await s.close()


async def test_connection_settings(store: SQLiteStore) -> None:
    def pragmas(conn: sqlite3.Connection) -> list[object]:
        names = ("journal_mode", "synchronous", "busy_timeout", "foreign_keys", "cache_size")
        return [conn.execute(f"PRAGMA {name}").fetchone()[0] for name in names]

    # synchronous 1 = NORMAL; a negative cache_size is KiB (SQLite's default -2000)
    assert await store._call(pragmas) == ["wal", 1, 5000, 1, -256]


# -- failures -------------------------------------------------------------------------


async def test_locked_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "svc.db"
    s = SQLiteStore(path, busy_timeout_ms=50)
    await s.migrate()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    with pytest.raises(StoreError, match="locked"):
        await s.create_account(AccountRecord(pid="acct_A", created_at=1))
    other.execute("ROLLBACK")
    other.close()
    await s.create_account(AccountRecord(pid="acct_A", created_at=1))  # not stuck in a tx
    assert await s.get_account("acct_A") is not None
    await s.close()


async def test_unreachable_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    unreachable = SQLiteStore(tmp_path / "a-file" / "svc.db")
    with pytest.raises(StoreError):
        await unreachable.ping()
    await unreachable.close()


async def test_a_cancelled_call_keeps_the_connection_until_its_thread_is_done(
    store: SQLiteStore,
) -> None:
    started, events = threading.Event(), []

    def slow(conn: sqlite3.Connection) -> None:
        started.set()
        time.sleep(0.2)
        events.append("slow done")

    task = asyncio.create_task(store._call(slow))
    await asyncio.to_thread(started.wait, 5)
    task.cancel()
    await store._call(lambda conn: events.append("next"))
    assert events == ["slow done", "next"]
    assert task.cancelled()


# -- open_store -----------------------------------------------------------------------


async def test_open_store_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = open_store("sqlite:///data/svc.db")
    assert isinstance(s, SQLiteStore)
    assert s.path == Path("data/svc.db")
    await s.migrate()
    await s.close()
    assert (tmp_path / "data" / "svc.db").is_file()


def test_open_store_absolute_path(tmp_path: Path) -> None:
    s = open_store(f"sqlite:///{tmp_path / 'svc.db'}")  # the path brings the fourth slash
    assert isinstance(s, SQLiteStore)
    assert s.path == tmp_path / "svc.db"
    assert s.path.is_absolute()
    s = open_store("sqlite:////var/lib/svc/svc.db")
    assert isinstance(s, SQLiteStore)
    assert s.path == Path("/var/lib/svc/svc.db")
    assert not s.path.exists()  # opening does no I/O


@pytest.mark.parametrize(
    "url",
    [
        "mysql://user:pw@host/db",
        "svc.db",
        "sqlite://svc.db",
        "sqlite:///",
        "sqlite:",
        "sqlite:///svc.db?mode=ro",
        "",
    ],
)
def test_open_store_rejects_bad_urls(url: str) -> None:
    with pytest.raises(ValueError, match="sqlite:///") as err:
        open_store(url)
    assert "pw" not in str(err.value)
