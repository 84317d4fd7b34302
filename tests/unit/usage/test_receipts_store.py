"""A receipt's durable row in both stores: found by the account and the id (one search of
the ``activity_ids`` index), with the part of its credits the earned pool paid, its tokens'
parts, its failovers and its prices; a row written before each was kept (schema versions
12, 13, 15, 16) tells none. A request the flusher writes from a real settle keeps its failovers."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from app.kv.fields import Served
from app.store import ActivityRecord, Store, open_store
from app.store import statements as sql
from app.store.migrations import MIGRATIONS
from app.usage.flusher import Flusher
from app.usage.receipts import Receipts
from tests.conftest import Clock
from tests.support.databases import Database
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, reserve

ROW = ActivityRecord(
    event_key="3:1790000000000-0",
    account_pid="acct_A",
    environment="live",
    created=1_790_000_000,
    id="chatcmpl-svc-1",
    kid="k1",
    requested_model="svc-auto",
    model="svc-fast",
    api="chat",
    prompt_tokens=10,
    completion_tokens=4,
    credits_used=7,
    outcome="completed",
    ttfb_ms=5,
    duration_ms=50,
    usage_source="upstream",
    earned_credits=3,
    cached_tokens=6,
    cache_write_tokens=1,
    reasoning_tokens=2,
    failovers=1,
    input_price=5,
    cached_input_price=2,
    cache_write_price=5,
    output_price=15,
)


@pytest.fixture
async def store(database: Database) -> AsyncIterator[Store]:
    s = database.open()
    await s.migrate()
    yield s
    await s.close()


async def test_a_row_is_found_by_its_account_and_id(store: Store) -> None:
    test_row = msgspec.structs.replace(
        ROW, event_key="3:1790000000000-1", id="resp_svc_ab12", environment="test"
    )
    assert await store.apply_usage(3, "1790000000000-1", [], activity=[ROW, test_row])
    assert await store.get_activity("acct_A", "chatcmpl-svc-1") == ROW
    assert await store.get_activity("acct_A", "resp_svc_ab12") == test_row
    assert await store.get_activity("acct_B", "chatcmpl-svc-1") is None  # not its account's
    assert await store.get_activity("acct_A", "chatcmpl-svc-2") is None


LATER = (
    "earned_credits",
    "cached_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "failovers",
    "input_price",
    "cached_input_price",
    "cache_write_price",
    "output_price",
    "provider",
    "upstream_model",
    "cost_currency",
    "upstream_cost_micros",
)


async def test_a_row_written_before_the_split_was_kept_has_none(database: Database) -> None:
    """Versions 13, 14, 16, 17 and 24 add columns to a table that has rows: theirs stay
    NULL."""
    s = database.open()
    try:
        await s.migrate()
        kept = [f for f in ActivityRecord.__struct_fields__ if f not in LATER]
        columns = ", ".join(kept)
        values = ", ".join(
            repr(getattr(ROW, f)) if isinstance(getattr(ROW, f), int) else f"'{getattr(ROW, f)}'"
            for f in kept
        )
        await database.execute(f"INSERT INTO activity ({columns}) VALUES ({values})")
        found = await s.get_activity("acct_A", "chatcmpl-svc-1")
        assert found == msgspec.structs.replace(ROW, **dict.fromkeys(LATER))
    finally:
        await s.close()
    versions = dict(MIGRATIONS)
    assert versions[13] == ("ALTER TABLE activity ADD COLUMN earned_credits BIGINT",)
    assert all("activity" in statement for statement in versions[14])
    assert versions[16] == ("ALTER TABLE activity ADD COLUMN failovers BIGINT",)


async def test_the_lookup_is_one_search_of_the_ids_index(tmp_path: Path) -> None:
    path = tmp_path / "plan.db"
    s = open_store(f"sqlite:///{path}")
    await s.migrate()
    await s.close()
    conn = sqlite3.connect(path)
    try:
        conn.execute("ANALYZE")
        explained = conn.execute("EXPLAIN QUERY PLAN " + sql.GET_ACTIVITY, ("acct_A", "x"))
        plan = " | ".join(row[3] for row in explained)
    finally:
        conn.close()
    assert "SEARCH activity USING INDEX activity_ids (account_pid=? AND id=?)" in plan, plan


async def test_the_flusher_writes_a_settled_request_s_failovers(
    ledger: Ledgers, store: Store, clock: Clock
) -> None:
    """From a real settle on each Redis flavour to each store: the count settle was told,
    the same in the receipt before and after the flush; a swept request's is not known."""
    await account(ledger, "acct_FS", purchased=1_000)
    ident = await key(ledger, "acct_FS", "kidFS0000000")
    for n, failovers in enumerate((3, 0)):
        hold = await reserve(ledger, ident, f"rsv_FS{n}", clock())
        await ledger.holds.settle(
            hold,
            now=clock(),
            credits_used=2,
            prompt_tokens=4,
            completion_tokens=2,
            outcome="completed",
            served=Served(response_id=f"chatcmpl-svc-fs{n}", created=int(clock())),
            failovers=failovers,
        )
    swept = await reserve(ledger, ident, "rsv_FSswept", clock(), deadline=clock() + 5)
    clock.advance(10)
    await ledger.holds.settle(
        swept,
        now=clock(),
        credits_used=0,
        outcome="swept",
        only_if_expired=True,
        failovers=0,
    )
    ids = ("chatcmpl-svc-fs0", "chatcmpl-svc-fs1", "rsv_FSswept")
    receipts = Receipts(store, ledger.redis, ledger.layout)
    before = [await receipts.find("acct_FS", i, "live") for i in ids]
    assert [r.failovers for r in before] == [3, 0, None]
    assert await Flusher(ledger.redis, ledger.layout, store, clock=clock).flush_all() == 3
    rows = [await store.get_activity("acct_FS", i) for i in ids]
    assert [r.failovers if r else "missing" for r in rows] == [3, 0, None]
    assert [await receipts.find("acct_FS", i, "live") for i in ids] == before
