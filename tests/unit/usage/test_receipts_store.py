"""A receipt's durable row in both stores: found by the account and the id (one search of
the ``activity_ids`` index), with the part of its credits the earned pool paid; a row
written before that part was kept (schema version 12) tells none."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from app.store import ActivityRecord, Store, open_store
from app.store import statements as sql
from app.store.migrations import MIGRATIONS
from tests.support.databases import Database

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


LATER = ("earned_credits", "cached_tokens", "cache_write_tokens", "reasoning_tokens")


async def test_a_row_written_before_the_split_was_kept_has_none(database: Database) -> None:
    """Versions 13 and 14 add columns to a table that has rows: theirs stay NULL."""
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
