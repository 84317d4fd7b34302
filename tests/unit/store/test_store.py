"""The store contract on every driver: each test runs on a SQLite file and on a real
PostgreSQL database (a throwaway server, see ``tests/support/postgres.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import pytest

from app.core.errors import StoreConflict, StoreError
from app.store import (
    AccountRecord,
    GrantRecord,
    KeyRecord,
    KeyRotation,
    Store,
    UsageBatch,
    UsageRollup,
    migrations,
    stream_id_key,
)
from app.store.migrations import MIGRATIONS
from tests.support.databases import Database

TABLES = {
    "schema_migrations",
    "accounts",
    "api_keys",
    "credit_grants",
    "usage_daily",
    "flush_cursors",
    "credit_expiries",
    "activity",
    "webhooks",
    "webhook_deliveries",
    "audit_log",
    "purchase_events_kept",
    "purchases",
    "account_tokens",
    "purchase_notices",
    "upstream_costs_daily",
    "revenue_entries",
}


@pytest.fixture
async def store(database: Database) -> AsyncIterator[Store]:
    """A migrated store with two accounts, acct_A and acct_B."""
    s = database.open()
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
        kind="reward",
        applied_at=created_at,
    )


def _use(
    day: str,
    credits: int,
    *,
    kid: str = "k1",
    alias: str = "svc-fast",
    env: str = "live",
    pid: str = "acct_A",
    api: str = "chat",
) -> UsageRollup:
    return UsageRollup(
        account_pid=pid,
        kid=kid,
        day=day,
        alias=alias,
        environment=env,
        api=api,
        requests=1,
        prompt_tokens=10,
        completion_tokens=20,
        credits=credits,
    )


# -- schema ---------------------------------------------------------------------------


def test_migration_versions_only_grow() -> None:
    versions = [version for version, _ in MIGRATIONS]
    assert versions == sorted(set(versions))
    assert versions[0] == 1


async def test_migrate_twice_is_a_noop(database: Database) -> None:
    s = database.open()
    await s.migrate()
    await s.create_account(AccountRecord(pid="acct_A", created_at=1))
    await s.migrate()
    assert await s.get_account("acct_A") == AccountRecord(pid="acct_A", created_at=1)
    await s.close()
    versions = await database.query("SELECT version FROM schema_migrations ORDER BY version")
    assert versions == [(v,) for v, _ in MIGRATIONS]
    assert await database.tables() == TABLES


async def test_stores_migrate_one_database_concurrently(database: Database) -> None:
    stores = [database.open() for _ in range(4)]
    await asyncio.gather(*(s.migrate() for s in stores), stores[0].migrate())
    await stores[0].create_account(AccountRecord(pid="acct_A", created_at=1))
    assert await stores[-1].get_account("acct_A") is not None
    await asyncio.gather(*(s.close() for s in stores))
    assert await database.query("SELECT COUNT(*) FROM schema_migrations") == [(len(MIGRATIONS),)]


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


async def test_ties_sort_by_id_byte_wise(store: Store) -> None:
    # Byte order puts upper case first; a natural-language collation would not.
    for pid in ("acct_y", "acct_x", "acct_Y"):
        await store.create_account(AccountRecord(pid=pid, created_at=7))
    assert [a.pid for a in await store.list_accounts()][2:] == ["acct_Y", "acct_x", "acct_y"]
    for grant_id in ("g-b", "g-a", "g-B"):
        assert await store.insert_grant(_grant(grant_id, 7))
    assert [g.grant_id for g in await store.list_grants("acct_A")] == ["g-B", "g-a", "g-b"]


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
    # k-a and k-b share a second: the one inserted later lists first.
    assert [k.kid for k in await store.list_keys("acct_A")] == ["k-new", "k-a", "k-b", "k-old"]
    assert await store.list_keys("acct_none") == []
    assert await store.count_active_keys("acct_A", 100) == 4
    assert await store.count_active_keys("acct_none", 100) == 0


async def test_keys_inserted_at_once_get_distinct_seq(store: Store, database: Database) -> None:
    await asyncio.gather(*(store.insert_key(_key(f"k{n:02}", 10)) for n in range(12)))
    rows = await database.query("SELECT COUNT(DISTINCT seq), MIN(seq), MAX(seq) FROM api_keys")
    assert rows == [(12, 1, 12)]


async def test_revoke_for_another_account_changes_nothing(store: Store) -> None:
    await store.insert_key(_key("k1", 10))
    assert await store.revoke_key("acct_B", "k1", 50) is None
    assert await store.revoke_key("acct_A", "k-unknown", 50) is None
    assert await store.get_key("k1") == _key("k1", 10)
    assert await store.count_active_keys("acct_A", 100) == 1


async def test_revoke_is_idempotent(store: Store) -> None:
    await store.insert_key(_key("k1", 10))
    await store.insert_key(_key("k2", 11))
    first = await store.revoke_key("acct_A", "k1", 50)
    assert first is not None
    assert (first.status, first.revoked_at) == ("revoked", 50)
    assert await store.revoke_key("acct_A", "k1", 99) == first  # keeps the first revoked_at
    assert await store.get_key("k1") == first
    assert [k.status for k in await store.list_keys("acct_A")] == ["active", "revoked"]
    assert await store.count_active_keys("acct_A", 100) == 1


async def test_expired_keys_are_not_active(store: Store) -> None:
    await store.insert_key(msgspec.structs.replace(_key("k1", 10), expires_at=60))
    await store.insert_key(_key("k2", 10))
    assert await store.count_active_keys("acct_A", 59) == 2
    assert await store.count_active_keys("acct_A", 60) == 1
    assert await store.insert_key(_key("k3", 70), max_active=2)  # k1 no longer counts


def _successor(old: str, kid: str, now: int, pid: str = "acct_A") -> KeyRecord:
    return msgspec.structs.replace(
        _key(kid, now, pid=pid), lineage=old, replaces=old, rate_limit_rpm=60
    )


async def test_a_rotation_writes_the_successor_and_ends_the_old_key(store: Store) -> None:
    await store.insert_key(_key("k1", 10))
    assert await store.rotate_key(_successor("k1", "k2", 20), 80) is KeyRotation.ROTATED
    old, new = await store.get_key("k1"), await store.get_key("k2")
    assert old is not None
    assert old.expires_at == 80
    assert new == _successor("k1", "k2", 20)
    # one successor per key: a second rotation of k1 writes nothing
    assert await store.rotate_key(_successor("k1", "k3", 30), 30) is KeyRotation.ROTATED_BEFORE
    assert await store.get_key("k3") is None
    assert (await store.get_key("k1")) == old
    # the successor can be rotated in its turn; an earlier expiry is kept
    await store.update_key("acct_A", "k2", {"expires_at": 50})
    assert await store.rotate_key(_successor("k1", "k4", 40), 99) is KeyRotation.ROTATED_BEFORE
    rotated = msgspec.structs.replace(_successor("k1", "k4", 40), replaces="k2")
    assert await store.rotate_key(rotated, 99) is KeyRotation.ROTATED
    assert (await store.get_key("k2")).expires_at == 50  # type: ignore[union-attr]
    # a revoked successor allows another rotation (the way out of a lost answer)
    await store.revoke_key("acct_A", "k4", 45)
    again = msgspec.structs.replace(_successor("k1", "k5", 46), replaces="k2")
    assert await store.rotate_key(again, 99) is KeyRotation.ROTATED


async def test_only_an_active_unexpired_key_of_the_account_rotates(store: Store) -> None:
    await store.insert_key(_key("k1", 10))
    await store.insert_key(msgspec.structs.replace(_key("k2", 10), expires_at=30))
    await store.insert_key(_key("k3", 10))
    await store.revoke_key("acct_A", "k3", 20)
    cases = [
        _successor("k2", "n1", 30),  # expired at 30
        _successor("k3", "n2", 30),  # revoked
        _successor("k1", "n3", 30, pid="acct_B"),  # another account's
        _successor("k-none", "n4", 30),
    ]
    for new in cases:
        assert await store.rotate_key(new, 90) is KeyRotation.NOT_ACTIVE
        assert await store.get_key(new.kid) is None
    assert (await store.get_key("k1")).expires_at is None  # type: ignore[union-attr]


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
    with pytest.raises(StoreConflict):  # a new grant id for an unknown account
        await store.insert_grant(msgspec.structs.replace(_grant("g-x", 1), account_pid="acct_none"))


async def test_rewards_list_newest_first_with_the_days_count(store: Store) -> None:
    for grant_id, at in (("g-1", 100), ("g-3", 300), ("g-2", 200), ("g-2b", 200)):
        assert await store.insert_grant(_grant(grant_id, at))
    purchase = msgspec.structs.replace(
        _grant("g-buy", 400), pool="purchased", source="admin", kind="grant"
    )
    assert await store.insert_grant(purchase)  # not a reward
    rewards, today = await store.list_rewards("acct_A", 3, 200)
    assert [g.grant_id for g in rewards] == ["g-3", "g-2b", "g-2"]
    assert today == 3  # at or after 200
    assert await store.list_rewards("acct_B", 10, 0) == ([], 0)


# -- usage ----------------------------------------------------------------------------


def test_stream_ids_compare_numerically() -> None:
    assert stream_id_key("1700000000000-5") < stream_id_key("1700000000000-10")
    assert stream_id_key("999-0") < stream_id_key("1000-0")
    assert stream_id_key("42") == (42, 0)
    with pytest.raises(ValueError):
        stream_id_key("not-an-id")


async def test_apply_usage_applies_only_after_the_cursor_it_was_read_after(
    store: Store,
) -> None:
    day = "2026-11-20"
    # two drainers read overlapping batches after the same (empty) cursor
    assert await store.apply_usage(7, "5-0", [_use(day, 5)], after=None)
    assert not await store.apply_usage(7, "9-0", [_use(day, 9)], after=None)  # stale start
    assert await store.get_cursor(7) == "5-0"
    assert not await store.apply_usage(7, "9-0", [_use(day, 4)], after="4-0")
    assert await store.apply_usage(7, "9-0", [_use(day, 4)], after="5-0")
    totals = await store.usage_totals("acct_A")
    assert totals is not None
    assert (totals.requests, totals.credits) == (2, 9)


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


async def test_usage_batches_apply_in_one_call_each_checked_on_its_own(store: Store) -> None:
    day = "2026-11-20"
    assert await store.apply_usage(5, "8-0", [_use(day, 1)])
    batches = [
        UsageBatch(shard=9, last_stream_id="3-0", rollups=[_use(day, 2)], after=None),
        UsageBatch(shard=5, last_stream_id="7-0", rollups=[_use(day, 100)]),  # a replay
        UsageBatch(shard=2, last_stream_id="4-0", rollups=[_use(day, 200)], after="1-0"),
        UsageBatch(shard=6, last_stream_id="2-0", rollups=[_use(day, 3)]),
    ]
    # in the order asked, though applied in shard order; shard 2's cursor is not "1-0"
    assert await store.apply_usage_batches(batches) == [True, False, False, True]
    cursors = [await store.get_cursor(shard) for shard in (2, 5, 6, 9)]
    assert cursors == [None, "8-0", "2-0", "3-0"]
    totals = await store.usage_totals("acct_A")
    assert totals is not None
    assert (totals.requests, totals.credits) == (3, 6)
    assert await store.apply_usage_batches(batches) == [False, False, False, False]
    assert await store.apply_usage_batches([]) == []
    with pytest.raises(ValueError):  # a bad id fails before anything is written
        await store.apply_usage_batches([*batches, UsageBatch(shard=1, last_stream_id="x")])


async def test_apply_usage_accumulates_in_one_row(store: Store, database: Database) -> None:
    batch = [_use("2026-11-20", 2), _use("2026-11-20", 5)]  # same key in one batch
    assert await store.apply_usage(0, "1-0", batch)
    assert await store.apply_usage(0, "2-0", [_use("2026-11-20", 4)])
    rows = await database.query("SELECT requests, prompt_tokens, credits FROM usage_daily")
    assert rows == [(3, 30, 11)]


async def test_apply_usage_is_all_or_nothing(store: Store) -> None:
    too_big = _use("2026-11-20", 2**63)  # both databases keep 64-bit signed integers
    with pytest.raises(OverflowError):
        await store.apply_usage(0, "5-0", [_use("2026-11-20", 1), too_big])
    assert await store.get_cursor(0) is None
    assert await store.usage_totals("acct_A") is None
    with pytest.raises(ValueError):
        await store.apply_usage(0, "garbage", [_use("2026-11-20", 1)])
    assert await store.apply_usage(0, "5-0", [_use("2026-11-20", 1)])


async def test_usage_daily_grouped_by_api_sums_to_the_day(store: Store) -> None:
    await store.apply_usage(
        1,
        "10-0",
        [
            _use("2026-11-20", 2),
            _use("2026-11-20", 3, kid="k2", api="responses"),
            _use("2026-11-20", 4, alias="svc-code", api="responses"),
            _use("2026-11-21", 5),
            _use("2026-11-21", 100, env="test", api="responses"),
        ],
    )
    grouped = await store.usage_daily("acct_A", "2026-11-20", group_by="api")
    assert [(d.day, d.api, d.requests, d.credits) for d in grouped] == [
        ("2026-11-21", "chat", 1, 5),
        ("2026-11-20", "chat", 1, 2),
        ("2026-11-20", "responses", 2, 7),
    ]
    ungrouped = await store.usage_daily("acct_A", "2026-11-20")
    assert [(d.day, d.api, d.credits) for d in ungrouped] == [
        ("2026-11-21", "", 5),
        ("2026-11-20", "", 9),
    ]
    snapshot = await store.ledger_snapshot(since_day="2026-11-20")
    mine = {(u.environment, u.api, u.credits) for u in snapshot.usage if u.account_pid == "acct_A"}
    assert mine == {("live", "chat", 7), ("live", "responses", 7), ("test", "responses", 100)}


async def test_migration_4_keeps_earlier_usage_as_chat(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database at version 3 holds usage from before APIs were told apart: after the
    upgrade its rows are chat's, and a Responses row of the same key, day and alias is a row
    of its own."""
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:3])
    old = database.open()
    await old.migrate()
    await old.close()
    await database.execute(
        "INSERT INTO usage_daily (account_pid, kid, day, alias, environment, requests, "
        "prompt_tokens, completion_tokens, credits, earned_credits) "
        "VALUES ('acct_A', 'k1', '2026-11-20', 'svc-fast', 'live', 3, 30, 60, 9, 4)"
    )
    monkeypatch.undo()
    s = database.open()
    await s.migrate()
    try:
        assert await s.apply_usage(0, "1-0", [_use("2026-11-20", 5, api="responses")])
        assert await s.apply_usage(0, "2-0", [_use("2026-11-20", 1)])
        rows = await database.query(
            "SELECT api, requests, credits, earned_credits FROM usage_daily ORDER BY api"
        )
        assert rows == [("chat", 4, 10, 4), ("responses", 1, 5, 0)]
    finally:
        await s.close()


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
        api="",
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


# -- lifecycle ------------------------------------------------------------------------


async def test_a_closed_store_raises_store_error(database: Database) -> None:
    s = database.open()
    await s.ping()
    await s.close()
    await s.close()
    with pytest.raises(StoreError, match="closed"):
        await s.ping()
    never_used = database.open()
    await never_used.close()
    with pytest.raises(StoreError, match="closed"):
        await never_used.migrate()


async def test_last_usage_day(store: Store) -> None:
    assert await store.last_usage_day() is None
    await store.apply_usage(1, "1-0", [_use("2026-11-20", 1), _use("2026-11-22", 1)])
    await store.apply_usage(2, "1-0", [_use("2026-11-21", 1, env="test")])
    assert await store.last_usage_day() == "2026-11-22"


async def test_usage_totals_before_a_day(store: Store) -> None:
    await store.apply_usage(
        1, "1-0", [_use("2026-11-20", 1), _use("2026-11-21", 2), _use("2026-11-22", 4)]
    )
    before = await store.usage_totals("acct_A", before_day="2026-11-22")
    assert before is not None
    assert (before.requests, before.credits) == (2, 3)
    assert await store.usage_totals("acct_A", before_day="2026-11-20") is None
    everything = await store.usage_totals("acct_A")
    assert everything is not None
    assert everything.credits == 7


async def test_concurrent_key_inserts_never_pass_the_active_limit(
    store: Store, database: Database
) -> None:
    # separate stores (separate connections, as separate workers would have)
    others = [database.open() for _ in range(4)]
    try:
        results = await asyncio.gather(
            *(
                s.insert_key(_key(f"kid{i:09d}", 10 + i), max_active=5)
                for i, s in enumerate([store, *others] * 3)
            )
        )
    finally:
        for s in others:
            await s.close()
    assert results.count(True) == 5
    assert await store.count_active_keys("acct_A", 100) == 5
    await store.revoke_key("acct_A", "kid000000000", 99)
    assert await store.insert_key(_key("kidlate00000", 50), max_active=5)
    assert not await store.insert_key(_key("kidlate00001", 51), max_active=5)
    assert await store.insert_key(_key("kidnolimit00", 52))  # no limit asked: written


async def test_ledger_snapshot_sums_days_from_the_day_asked_for(store: Store) -> None:
    await store.apply_usage(
        1,
        "1-0",
        [
            _use("2026-11-20", 1),
            _use("2026-11-21", 2, kid="k1"),
            _use("2026-11-21", 3, kid="k2", alias="svc-code"),
            _use("2026-11-21", 100, env="test"),
            _use("2026-11-22", 1000, pid="acct_B"),
        ],
    )
    assert (await store.ledger_snapshot()).usage_days == []  # none unless asked for
    snap = await store.ledger_snapshot(since_day="2026-11-21")
    # per key and model as well: what the day hashes count them by
    days = sorted(
        (d.account_pid, d.environment, d.day, d.kid, d.alias, d.requests, d.credits)
        for d in snap.usage_days
    )
    k0 = _use("2026-11-21", 1).kid
    assert days == [
        ("acct_A", "live", "2026-11-21", "k1", "svc-fast", 1, 2),
        ("acct_A", "live", "2026-11-21", "k2", "svc-code", 1, 3),
        ("acct_A", "test", "2026-11-21", k0, "svc-fast", 1, 100),
        ("acct_B", "live", "2026-11-22", k0, "svc-fast", 1, 1000),
    ]
    assert sum(u.credits for u in snap.usage) == 1106  # the all-time sums are unchanged


async def test_a_rotation_with_a_grace_counts_toward_the_active_key_limit(store: Store) -> None:
    """Issue 30, item 6: the old key is active through its grace, so a rotation at the limit
    with a grace writes nothing; without one the old key ends as the new one starts."""
    await store.insert_key(_key("k1", 10))
    await store.insert_key(_key("k2", 10))
    limited = await store.rotate_key(_successor("k1", "k3", 20), 80, max_active=2)
    assert limited is KeyRotation.LIMIT_REACHED
    assert await store.get_key("k3") is None
    assert (await store.get_key("k1")).expires_at is None  # type: ignore[union-attr]
    assert await store.rotate_key(_successor("k1", "k3", 20), 20, max_active=2) is (
        KeyRotation.ROTATED
    )
    assert await store.count_active_keys("acct_A", 20) == 2
    # under the limit, a grace is fine (k1 ended at 20: its successor k3 is rotated)
    rotated = msgspec.structs.replace(_successor("k1", "k4", 30), replaces="k3")
    assert await store.rotate_key(rotated, 90, max_active=3) is KeyRotation.ROTATED
    assert await store.count_active_keys("acct_A", 30) == 3


async def test_a_key_keeps_its_role(store: Store) -> None:
    await store.insert_key(msgspec.structs.replace(_key("k1", 10), role="inference"))
    await store.insert_key(_key("k2", 10))
    roles = {k.kid: k.role for k in await store.list_keys("acct_A")}
    assert roles == {"k1": "inference", "k2": "admin"}  # made without a role: admin
    updated = await store.update_key("acct_A", "k1", {"role": "admin"})
    assert updated is not None
    assert updated.role == "admin"


async def test_a_half_made_account_or_refused_grant_can_be_taken_back(store: Store) -> None:
    """What a Redis failure half-way leaves (issue 44 item 3) goes: a new account with
    nothing referring to it, a grant Redis refused. An account in use stays."""
    await store.create_account(AccountRecord(pid="acct_N", created_at=3))
    assert await store.delete_new_account("acct_N")
    assert await store.get_account("acct_N") is None
    assert not await store.delete_new_account("acct_N")
    assert await store.insert_grant(_grant("g-refused", 4))
    assert not await store.delete_new_account("acct_A")  # it has a grant
    assert await store.delete_grant("g-refused")
    assert await store.get_grant("g-refused") is None
    assert not await store.delete_grant("g-refused")
    await store.insert_key(_key("k1", 5, pid="acct_B"))
    assert not await store.delete_new_account("acct_B")  # it has a key
    assert await store.get_account("acct_B") is not None
