"""Activity rows in both stores: written once with the flusher's batch, listed newest first
a page at a time, pruned in batches; every page is one range scan of an index."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from app.store import ActivityQuery, ActivityRecord, Store
from app.store import postgres_sql as pgsql
from app.store import statements as sql
from tests.support.databases import Database

DAY = 86_400
T0 = 1_790_000_000


@pytest.fixture
async def store(database: Database) -> AsyncIterator[Store]:
    """A migrated store on each driver."""
    s = database.open()
    await s.migrate()
    yield s
    await s.close()


def _row(
    n: int, *, created: int, kid: str = "k1", model: str = "svc-fast", env: str = "live"
) -> ActivityRecord:
    return ActivityRecord(
        event_key=f"3:{created * 1000}-{n}",
        account_pid="acct_A",
        environment=env,
        created=created,
        id=f"chatcmpl-svc-{n}",
        kid=kid,
        requested_model=model,
        model=model,
        api="chat",
        prompt_tokens=10,
        completion_tokens=n,
        credits_used=n,
        outcome="completed",
        ttfb_ms=5,
        duration_ms=50,
        usage_source="upstream",
    )


def _query(**changes: object) -> ActivityQuery:
    base = ActivityQuery(account_pid="acct_A", environment="live", limit=500)
    return msgspec.structs.replace(base, **changes)


async def _apply(store: Store, cursor: str, rows: list[ActivityRecord]) -> bool:
    return await store.apply_usage(3, cursor, [], activity=rows)


async def test_rows_are_written_once_and_listed_newest_first(store: Store) -> None:
    # three rows in one second: the event key orders them
    rows = [_row(n, created=T0 + n // 3, kid=("k1", "k2")[n % 2]) for n in range(9)]
    assert await _apply(store, "5-0", rows)
    assert not await _apply(store, "5-0", rows)  # a replayed batch writes nothing
    listed = await store.list_activity(_query())
    assert listed == sorted(rows, key=lambda r: (r.created, r.event_key), reverse=True)
    assert [r.id for r in await store.list_activity(_query(kid="k2"))] == [
        f"chatcmpl-svc-{n}" for n in (7, 5, 3, 1)
    ]
    assert await store.list_activity(_query(model="svc-code")) == []
    assert await store.list_activity(_query(environment="test")) == []


async def test_pages_follow_each_other_without_gaps_or_repeats(store: Store) -> None:
    rows = [_row(n, created=T0 + n // 4) for n in range(23)]
    assert await _apply(store, "5-0", rows)
    seen: list[ActivityRecord] = []
    query = _query(limit=5)
    while True:
        page = await store.list_activity(query)
        seen += page
        if len(page) < 5:
            break
        position = await store.activity_position("acct_A", page[-1].id)
        assert position == (page[-1].created, page[-1].event_key)
        query = msgspec.structs.replace(query, after=position)
    assert seen == await store.list_activity(_query())
    assert len(seen) == 23
    assert await store.activity_position("acct_B", "chatcmpl-svc-1") is None


async def test_a_day_is_a_range_of_created(store: Store) -> None:
    rows = [
        _row(0, created=T0 - 1),
        _row(1, created=T0),
        _row(2, created=T0 + DAY - 1),
        _row(3, created=T0 + DAY),
    ]
    assert await _apply(store, "5-0", rows)
    listed = await store.list_activity(_query(since=T0, until=T0 + DAY))
    assert [r.id for r in listed] == ["chatcmpl-svc-2", "chatcmpl-svc-1"]


async def test_prune_deletes_the_days_before_in_batches(store: Store) -> None:
    midnight = T0 - T0 % DAY
    # ten rows of the day before, two of the day itself (one a second after midnight)
    rows = [_row(n, created=midnight - 1 - n * 3600) for n in range(10)]
    rows += [_row(10, created=midnight), _row(11, created=midnight + 1)]
    assert await _apply(store, "5-0", rows)
    assert await store.prune_activity(midnight + 1000, 4) == 4
    assert await store.prune_activity(midnight + 1000, 4) == 4
    assert await store.prune_activity(midnight + 1000, 4) == 2
    assert await store.prune_activity(midnight + 1000, 4) == 0
    assert [r.id for r in await store.list_activity(_query())] == [
        "chatcmpl-svc-11",
        "chatcmpl-svc-10",
    ]


# -- query plans ----------------------------------------------------------------------

PAGES = [
    _query(limit=100),
    _query(limit=100, after=(T0, "3:x")),
    _query(limit=100, kid="k1", after=(T0, "3:x")),
    _query(limit=100, model="svc-fast", since=T0, until=T0 + DAY),
    _query(limit=100, kid="k1", model="svc-fast", since=T0, until=T0 + DAY, after=(T0, "3:x")),
]


def _indexes(query: ActivityQuery, primary_key: str) -> set[str]:
    """The indexes a page may be read by (either, for one key's rows of one model; the
    primary key, named ``primary_key`` by the database, for all rows)."""
    named = {
        name
        for name, value in (("activity_by_key", query.kid), ("activity_by_model", query.model))
        if value is not None
    }
    return named or {primary_key}


@pytest.mark.parametrize("query", PAGES)
async def test_sqlite_reads_a_page_by_one_index_range_without_sorting(
    tmp_path: object, query: ActivityQuery
) -> None:
    import sqlite3

    from app.store import open_store

    path = Path(str(tmp_path)) / "plan.db"
    s = open_store(f"sqlite:///{path}")
    await s.migrate()
    await s.close()
    conn = sqlite3.connect(path)
    try:
        conn.execute("ANALYZE")
        statement, args = sql.activity_page(query)
        plan = " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + statement, args))
    finally:
        conn.close()
    sqlite_pk = "sqlite_autoindex_activity_1"
    assert any(f"SEARCH activity USING INDEX {i} " in plan for i in _indexes(query, sqlite_pk)), (
        plan
    )
    assert "TEMP B-TREE" not in plan, plan  # the index gives the order: no sort


@pytest.mark.parametrize("query", PAGES)
async def test_postgresql_reads_a_page_by_one_index_range_without_sorting(
    postgres_url: str, query: ActivityQuery
) -> None:
    """200,000 rows of 200 accounts, analyzed: the planner picks the index, in order."""
    import psycopg

    s = Database("postgresql", postgres_url).open()
    await s.migrate()
    await s.close()
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as pg:
        await pg.execute(
            "INSERT INTO activity SELECT '3:' || i, 'acct_' || (i % 200), 'live', "
            f"{T0} + i / 10, 'chatcmpl-svc-' || i, 'k' || (i % 7), 'svc-fast', "
            "(ARRAY['svc-fast','svc-code','svc-smart'])[1 + i % 3], 'chat', 10, 20, 3, "
            "'completed', 5, 50, 'upstream' FROM generate_series(1, 200000) AS i"
        )
        await pg.execute("ANALYZE activity")
        statement, args = sql.activity_page(query)
        rows = await (await pg.execute("EXPLAIN " + pgsql.pg(statement), args)).fetchall()
    plan = " | ".join(str(r[0]) for r in rows)
    assert any(
        f"Index Scan Backward using {i} on activity" in plan
        for i in _indexes(query, "activity_pkey")
    ), plan
    assert "Sort" not in plan, plan
