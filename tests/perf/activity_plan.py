"""Request activity at scale: fill ``activity`` with N rows (10 million by default) on
SQLite and on PostgreSQL, then time each kind of page ``GET /v1/activity`` reads and
print its query plan.

    python -m tests.perf.activity_plan                      # 10,000,000 rows, both databases
    python -m tests.perf.activity_plan --rows 1000000 --only sqlite
    python -m tests.perf.activity_plan --postgres-url postgresql://user@host/db

The rows are made inside each database (a recursive CTE, ``generate_series``): 20 % belong
to one large account (the worst case for its pages), the rest to 9,973 others; 7 keys and
3 models; ten rows a second. Without ``--postgres-url`` a throwaway PostgreSQL server is
started as the test suite starts one (``tests/support/postgres.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from app.store import ActivityQuery, open_store
from app.store import postgres_sql as pgsql
from app.store import statements as sql

T0 = 1_790_000_000
BIG = "acct_big"
RUNS = 25  # timed reads of each page

# One row per i: the expressions both databases accept (|| and % alike).
_SELECT = (
    "SELECT '3:' || i, CASE WHEN i % 5 = 0 THEN 'acct_big' ELSE 'acct_' || (i % 9973) END, "
    "'live', {t0} + i / 10, 'chatcmpl-svc-' || i, 'k' || (i % 7), 'svc-fast', "
    "CASE i % 3 WHEN 0 THEN 'svc-fast' WHEN 1 THEN 'svc-code' ELSE 'svc-smart' END, "
    "'chat', 10, 20, 3, 'completed', 5, 50, 'upstream'"
)


def pages(rows: int) -> dict[str, ActivityQuery]:
    """The pages a client reads: the newest, one deep in the list, by key, by model, by day."""
    base = ActivityQuery(account_pid=BIG, environment="live", limit=101)
    middle = T0 + rows // 20  # halfway through the rows' times
    day = middle - middle % 86_400
    return {
        "newest 100": base,
        "100 after a row halfway down": msgspec.structs.replace(base, after=(middle, "3:5")),
        "one key, newest 100": msgspec.structs.replace(base, kid="k3"),
        "one model, newest 100": msgspec.structs.replace(base, model="svc-code"),
        "one day, newest 100": msgspec.structs.replace(base, since=day, until=day + 86_400),
    }


def _timed(read: Callable[[], Any]) -> float:
    """Median milliseconds of ``RUNS`` reads (after one to warm the cache)."""
    read()
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        read()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _fetch(conn: sqlite3.Connection, statement: str, args: tuple[Any, ...]) -> list[Any]:
    return conn.execute(statement, args).fetchall()


def run_sqlite(rows: int, folder: Path) -> list[tuple[str, float, str]]:
    path = folder / "activity.db"
    store = open_store(f"sqlite:///{path}")
    asyncio.run(store.migrate())
    asyncio.run(store.close())
    conn = sqlite3.connect(path)
    try:
        start = time.perf_counter()
        with conn:
            conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                "INSERT INTO activity " + _SELECT.format(t0=T0) + " FROM n",
                (rows,),
            )
        conn.execute("ANALYZE")
        print(f"sqlite: {rows:,} rows in {time.perf_counter() - start:.0f} s")
        found = []
        for name, query in pages(rows).items():
            statement, args = sql.activity_page(query)
            plan = " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + statement, args))
            ms = _timed(functools.partial(_fetch, conn, statement, args))
            found.append((name, ms, plan))
        return found
    finally:
        conn.close()


@contextmanager
def _postgres(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    from tests.support.postgres import server_url

    with server_url() as server:
        yield server


async def _run_postgres(rows: int, url: str) -> list[tuple[str, float, str]]:
    import psycopg

    store = open_store(url)
    await store.migrate()
    await store.close()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as pg:
        start = time.perf_counter()
        await pg.execute(
            "INSERT INTO activity "
            + _SELECT.format(t0=T0)
            + f" FROM generate_series(1, {int(rows)}) AS i"
        )
        await pg.execute("VACUUM ANALYZE activity")
        print(f"postgresql: {rows:,} rows in {time.perf_counter() - start:.0f} s")
        found = []
        for name, query in pages(rows).items():
            statement, args = sql.activity_page(query)
            statement = pgsql.pg(statement)
            plan_rows = await (await pg.execute("EXPLAIN " + statement, args)).fetchall()
            plan = " | ".join(str(r[0]).strip() for r in plan_rows)
            times = []
            for _ in range(RUNS + 1):
                t = time.perf_counter()
                await (await pg.execute(statement, args)).fetchall()
                times.append((time.perf_counter() - t) * 1000)
            found.append((name, statistics.median(times[1:]), plan))
        await pg.execute("DROP TABLE activity")
        return found


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.perf.activity_plan")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--only", choices=["sqlite", "postgresql"])
    parser.add_argument("--postgres-url", help="an empty database (default: a throwaway server)")
    args = parser.parse_args()
    results: dict[str, list[tuple[str, float, str]]] = {}
    if args.only != "postgresql":
        with tempfile.TemporaryDirectory() as folder:
            results["SQLite"] = run_sqlite(args.rows, Path(folder))
    if args.only != "sqlite":
        with _postgres(args.postgres_url) as url:
            results["PostgreSQL"] = asyncio.run(_run_postgres(args.rows, url))
    print(f"\n| database | page ({args.rows:,} rows) | median ms | plan |\n|---|---|--:|---|")
    for database, found in results.items():
        for name, ms, plan in found:
            print(f"| {database} | {name} | {ms:.2f} | `{plan}` |")


if __name__ == "__main__":
    main()
