"""The SQLite store on real files: schema, records, idempotency, exactly-once usage."""

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

from app.store import (
    AccountRecord,
    GrantRecord,
    KeyRecord,
    Store,
    StoreConflict,
    StoreError,
    UsageRollup,
    open_store,
    stream_id_key,
)
from app.store.migrations import MIGRATIONS
from app.store.sqlite import SQLiteStore

TABLES = {
    "schema_migrations",
    "accounts",
    "api_keys",
    "credit_grants",
    "usage_daily",
    "flush_cursors",
}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "svc.db")
    await s.migrate()
    await s.create_account(AccountRecord(pid="acct_A", created_at=1))
    await s.create_account(AccountRecord(pid="acct_B", created_at=2))
    yield s
    await s.close()


def _key(kid: str, created_at: int, pid: str = "acct_A", cap: int | None = None) -> KeyRecord:
    return KeyRecord(
        kid=kid,
        account_pid=pid,
        name=f"key {kid}",
        environment="live",
        daily_cap_credits=cap,
        secret_hash="$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaA",
        last4="wxyz",
        created_at=created_at,
    )


def _grant(grant_id: str, created_at: int, credits: int = 500) -> GrantRecord:
    return GrantRecord(
        grant_id=grant_id,
        account_pid="acct_A",
        pool="earned",
        credits=credits,
        source="spotlight",
        reference=f"view-{grant_id}",
        created_at=created_at,
        expires_at=created_at + 30 * 86400,
    )


def _use(
    day: str,
    credits: int,
    *,
    kid: str = "k1",
    alias: str = "svc-fast",
    env: str = "live",
    pid: str = "acct_A",
) -> UsageRollup:
    return UsageRollup(
        account_pid=pid,
        kid=kid,
        day=day,
        alias=alias,
        environment=env,
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


# -- schema ---------------------------------------------------------------------------


def test_migration_versions_only_grow() -> None:
    versions = [version for version, _ in MIGRATIONS]
    assert versions == sorted(set(versions))
    assert versions[0] == 1


async def test_migrate_twice_is_a_noop(tmp_path: Path) -> None:
    path = tmp_path / "svc.db"
    s = SQLiteStore(path)
    await s.migrate()
    await s.create_account(AccountRecord(pid="acct_A", created_at=1))
    await s.migrate()
    assert await s.get_account("acct_A") == AccountRecord(pid="acct_A", created_at=1)
    await s.close()
    assert _sql(path, "SELECT version FROM schema_migrations") == [(v,) for v, _ in MIGRATIONS]
    tables = {name for (name,) in _sql(path, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == TABLES


async def test_two_stores_migrate_one_file_concurrently(tmp_path: Path) -> None:
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
        names = ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
        return [conn.execute(f"PRAGMA {name}").fetchone()[0] for name in names]

    assert await store._run(pragmas) == ["wal", 1, 5000, 1]  # synchronous 1 = NORMAL


# -- accounts, keys, grants -----------------------------------------------------------


async def test_accounts_round_trip(store: Store) -> None:
    await store.create_account(AccountRecord(pid="acct_C", created_at=0, status="closed"))
    assert await store.get_account("acct_C") == AccountRecord(
        pid="acct_C", created_at=0, status="closed"
    )
    assert await store.get_account("acct_none") is None
    assert [a.pid for a in await store.list_accounts()] == ["acct_C", "acct_A", "acct_B"]
    with pytest.raises(StoreConflict):
        await store.create_account(AccountRecord(pid="acct_A", created_at=9))
    assert await store.get_account("acct_A") == AccountRecord(pid="acct_A", created_at=1)


async def test_keys_round_trip(store: Store) -> None:
    capped = _key("kidAAAAAAAA1", 10, cap=250)
    await store.insert_key(capped)
    await store.insert_key(_key("kidBBBBBBBB1", 10, pid="acct_B"))
    assert await store.get_key("kidAAAAAAAA1") == capped
    assert await store.get_key("kidBBBBBBBB1") == _key("kidBBBBBBBB1", 10, pid="acct_B")
    assert await store.get_key("nope") is None
    with pytest.raises(StoreConflict):
        await store.insert_key(_key("kidAAAAAAAA1", 11))
    with pytest.raises(StoreConflict):  # foreign key: the account must exist
        await store.insert_key(_key("kidCCCCCCCC1", 11, pid="acct_none"))
    assert await store.get_key("kidCCCCCCCC1") is None


async def test_list_keys_newest_first_then_by_kid(store: Store) -> None:
    for kid, created_at in [("k-b", 20), ("k-old", 5), ("k-a", 20), ("k-new", 30)]:
        await store.insert_key(_key(kid, created_at))
    await store.insert_key(_key("k-other", 99, pid="acct_B"))
    assert [k.kid for k in await store.list_keys("acct_A")] == ["k-new", "k-a", "k-b", "k-old"]
    assert await store.list_keys("acct_none") == []
    assert await store.count_active_keys("acct_A") == 4
    assert await store.count_active_keys("acct_none") == 0


async def test_revoke_for_another_account_changes_nothing(store: Store) -> None:
    await store.insert_key(_key("k1", 10))
    assert await store.revoke_key("acct_B", "k1", 50) is None
    assert await store.revoke_key("acct_A", "k-unknown", 50) is None
    assert await store.get_key("k1") == _key("k1", 10)
    assert await store.count_active_keys("acct_A") == 1


async def test_revoke_is_idempotent(store: Store) -> None:
    await store.insert_key(_key("k1", 10))
    await store.insert_key(_key("k2", 11))
    first = await store.revoke_key("acct_A", "k1", 50)
    assert first is not None
    assert (first.status, first.revoked_at) == ("revoked", 50)
    assert await store.revoke_key("acct_A", "k1", 99) == first  # keeps the first revoked_at
    assert await store.get_key("k1") == first
    assert [k.status for k in await store.list_keys("acct_A")] == ["active", "revoked"]
    assert await store.count_active_keys("acct_A") == 1


async def test_grants_round_trip_and_idempotency(store: Store) -> None:
    later, earlier = _grant("g-later", 20), _grant("g-earlier", 10)
    assert await store.insert_grant(later)
    assert await store.insert_grant(earlier)
    assert not await store.insert_grant(_grant("g-later", 30, credits=1))
    assert await store.get_grant("g-later") == later
    assert await store.get_grant("g-none") is None
    assert await store.list_grants("acct_A") == [earlier, later]
    assert await store.list_grants("acct_B") == []
    purchased = GrantRecord(
        grant_id="g-admin",
        account_pid="acct_B",
        pool="purchased",
        credits=10_000,
        source="admin",
        reference=None,
        created_at=5,
    )
    assert await store.insert_grant(purchased)
    assert await store.get_grant("g-admin") == purchased


# -- usage ----------------------------------------------------------------------------


def test_stream_ids_compare_numerically() -> None:
    assert stream_id_key("1700000000000-5") < stream_id_key("1700000000000-10")
    assert stream_id_key("999-0") < stream_id_key("1000-0")
    assert stream_id_key("42") == (42, 0)
    with pytest.raises(ValueError):
        stream_id_key("not-an-id")


async def test_apply_usage_skips_replays_at_or_below_the_cursor(store: Store) -> None:
    day = "2026-11-20"
    assert await store.get_cursor(3) is None
    assert await store.apply_usage(3, "1700000000000-5", [_use(day, 7)])
    assert not await store.apply_usage(3, "1700000000000-5", [_use(day, 7)])
    assert not await store.apply_usage(3, "1700000000000-4", [_use(day, 7)])
    assert not await store.apply_usage(3, "999999999999-99", [_use(day, 7)])
    # "-10" sorts before "-5" as text; as a stream id it is later.
    assert await store.apply_usage(3, "1700000000000-10", [_use(day, 3)])
    assert not await store.apply_usage(3, "1700000000000-9", [_use(day, 3)])
    assert await store.get_cursor(3) == "1700000000000-10"
    assert await store.get_cursor(4) is None  # shards are independent
    assert await store.apply_usage(4, "1-0", [])  # an empty batch still moves the cursor
    assert await store.get_cursor(4) == "1-0"
    totals = await store.usage_totals("acct_A")
    assert totals is not None
    assert (totals.requests, totals.prompt_tokens, totals.completion_tokens) == (2, 20, 40)
    assert totals.credits == 10


async def test_apply_usage_accumulates_in_one_row(store: SQLiteStore) -> None:
    batch = [_use("2026-11-20", 2), _use("2026-11-20", 5)]  # same key in one batch
    assert await store.apply_usage(0, "1-0", batch)
    assert await store.apply_usage(0, "2-0", [_use("2026-11-20", 4)])
    rows = await store._rows("SELECT requests, prompt_tokens, credits FROM usage_daily")
    assert rows == [(3, 30, 11)]


async def test_apply_usage_is_all_or_nothing(store: Store) -> None:
    too_big = _use("2026-11-20", 2**63)  # SQLite integers are 64-bit signed
    with pytest.raises(OverflowError):
        await store.apply_usage(0, "5-0", [_use("2026-11-20", 1), too_big])
    assert await store.get_cursor(0) is None
    assert await store.usage_totals("acct_A") is None
    with pytest.raises(ValueError):
        await store.apply_usage(0, "garbage", [_use("2026-11-20", 1)])
    assert await store.apply_usage(0, "5-0", [_use("2026-11-20", 1)])


async def test_usage_daily_and_totals_sum_by_environment(store: Store) -> None:
    await store.apply_usage(
        1,
        "10-0",
        [
            _use("2026-11-19", 1),
            _use("2026-11-20", 2, kid="k1"),
            _use("2026-11-20", 3, kid="k2", alias="svc-code"),
            _use("2026-11-21", 4),
            _use("2026-11-21", 100, env="test"),
            _use("2026-11-21", 1000, pid="acct_B"),
        ],
    )
    daily = await store.usage_daily("acct_A", "2026-11-20")
    assert [(d.day, d.requests, d.credits, d.prompt_tokens) for d in daily] == [
        ("2026-11-21", 1, 4, 10),
        ("2026-11-20", 2, 5, 20),
    ]
    assert {(d.kid, d.alias, d.environment, d.account_pid) for d in daily} == {
        ("", "", "live", "acct_A")
    }
    test_daily = await store.usage_daily("acct_A", "2026-01-01", environment="test")
    assert [(d.day, d.credits, d.environment) for d in test_daily] == [("2026-11-21", 100, "test")]
    assert await store.usage_daily("acct_A", "2026-11-22") == []

    totals = await store.usage_totals("acct_A")
    assert totals == UsageRollup(
        account_pid="acct_A",
        kid="",
        day="",
        alias="",
        environment="live",
        requests=4,
        prompt_tokens=40,
        completion_tokens=80,
        credits=10,
    )
    test_totals = await store.usage_totals("acct_A", environment="test")
    assert test_totals is not None
    assert test_totals.credits == 100
    assert await store.usage_totals("acct_B", environment="test") is None
    assert await store.usage_totals("acct_none") is None


# -- failures and lifecycle -----------------------------------------------------------


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


async def test_unreachable_and_closed_store_raise_store_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    unreachable = SQLiteStore(tmp_path / "a-file" / "svc.db")
    with pytest.raises(StoreError):
        await unreachable.ping()
    s = SQLiteStore(tmp_path / "svc.db")
    await s.ping()
    await s.close()
    await s.close()
    with pytest.raises(StoreError, match="closed"):
        await s.ping()


async def test_a_cancelled_call_keeps_the_connection_until_its_thread_is_done(
    store: SQLiteStore,
) -> None:
    started, events = threading.Event(), []

    def slow(conn: sqlite3.Connection) -> None:
        started.set()
        time.sleep(0.2)
        events.append("slow done")

    task = asyncio.create_task(store._run(slow))
    await asyncio.to_thread(started.wait, 5)
    task.cancel()
    await store._run(lambda conn: events.append("next"))
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


@pytest.mark.parametrize("url", ["postgresql://u@h/db", "postgres://u@h/db"])
def test_open_store_postgresql_is_not_built_yet(url: str) -> None:
    with pytest.raises(NotImplementedError, match="PostgreSQL store not built yet"):
        open_store(url)
