"""An account's external id in the store (issue 45 item 5), on a SQLite file and on a real
PostgreSQL database: set at creation or later, unique among the accounts that have one
(however many have none), found by it, and kept by one account when two ask at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from app.core.errors import StoreConflict
from app.store import AccountQuery, AccountRecord, Store, migrations
from app.store.migrations import MIGRATIONS
from tests.support.databases import Database


@pytest.fixture
async def store(database: Database) -> AsyncIterator[Store]:
    s = database.open()
    await s.migrate()
    yield s
    await s.close()


def _account(pid: str, external_id: str | None = None, created_at: int = 1) -> AccountRecord:
    return AccountRecord(pid=pid, created_at=created_at, external_id=external_id)


async def test_an_account_is_created_with_its_external_id_and_found_by_it(store: Store) -> None:
    assert await store.create_account(_account("acct_A", "user-42@example.com"))
    found = await store.find_external_id("user-42@example.com")
    assert found == _account("acct_A", "user-42@example.com")
    assert await store.get_account("acct_A") == found
    assert await store.find_external_id("user-43@example.com") is None
    assert await store.find_external_id("USER-42@example.com") is None  # exact


async def test_accounts_without_one_never_collide(store: Store) -> None:
    for pid in ("acct_A", "acct_B", "acct_C"):
        assert await store.create_account(_account(pid))
    assert [a.external_id for a in await store.list_accounts()] == [None, None, None]


async def test_a_taken_external_id_creates_nothing(store: Store, database: Database) -> None:
    assert await store.create_account(_account("acct_A", "u1"))
    assert not await store.create_account(_account("acct_B", "u1", created_at=2))
    assert await store.get_account("acct_B") is None
    assert await database.query("SELECT pid FROM accounts") == [("acct_A",)]
    # a pid that exists is still a conflict of its own
    with pytest.raises(StoreConflict):
        await store.create_account(_account("acct_A", "u2"))


async def test_two_creations_at_once_with_one_external_id_make_one_account(
    database: Database,
) -> None:
    """Each on a store (a connection) of its own, so PostgreSQL runs them side by side:
    the unique index, not a read before the write, decides."""
    stores = [database.open() for _ in range(6)]
    try:
        await stores[0].migrate()
        made = await asyncio.gather(
            *(s.create_account(_account(f"acct_{n}", "same")) for n, s in enumerate(stores))
        )
        assert sorted(made) == [False] * 5 + [True]
        rows = await database.query("SELECT pid FROM accounts WHERE external_id = 'same'")
        assert rows == [(f"acct_{made.index(True)}",)]
        assert await database.query("SELECT COUNT(*) FROM accounts") == [(1,)]
    finally:
        for s in stores:
            await s.close()


async def test_an_external_id_is_set_changed_and_cleared(store: Store) -> None:
    await store.create_account(_account("acct_A"))
    assert (await store.set_external_id("acct_A", "u1")) == _account("acct_A", "u1")
    assert (await store.set_external_id("acct_A", "u1")) == _account("acct_A", "u1")  # again
    assert (await store.set_external_id("acct_A", "u2")) == _account("acct_A", "u2")
    assert await store.find_external_id("u1") is None  # free for another account
    assert (await store.set_external_id("acct_A", None)) == _account("acct_A")
    assert await store.find_external_id("u2") is None
    assert await store.set_external_id("acct_nope", "u3") is None
    assert await store.find_external_id("u3") is None


async def test_setting_another_account_s_external_id_changes_nothing(store: Store) -> None:
    await store.create_account(_account("acct_A", "u1"))
    await store.create_account(_account("acct_B", "u2", created_at=2))
    with pytest.raises(StoreConflict):
        await store.set_external_id("acct_B", "u1")
    assert await store.get_account("acct_B") == _account("acct_B", "u2", created_at=2)
    assert await store.find_external_id("u1") == _account("acct_A", "u1")


async def test_two_accounts_set_one_external_id_at_once_one_keeps_it(database: Database) -> None:
    first, second = database.open(), database.open()
    try:
        await first.migrate()
        await first.create_account(_account("acct_A"))
        await first.create_account(_account("acct_B", created_at=2))

        async def claim(s: Store, pid: str) -> bool:
            try:
                return await s.set_external_id(pid, "same") is not None
            except StoreConflict:
                return False

        won = await asyncio.gather(claim(first, "acct_A"), claim(second, "acct_B"))
        assert sorted(won) == [False, True]
        owner = "acct_A" if won[0] else "acct_B"
        assert await database.query("SELECT pid FROM accounts WHERE external_id = 'same'") == [
            (owner,)
        ]
    finally:
        await first.close()
        await second.close()


async def test_a_page_of_accounts_filtered_by_external_id(store: Store) -> None:
    await store.create_account(_account("acct_A", "u1", created_at=1))
    await store.create_account(_account("acct_B", "u2", created_at=2))
    await store.create_account(_account("acct_C", created_at=3))
    page = await store.list_accounts_page(AccountQuery(limit=10, external_id="u2"))
    assert [a.pid for a in page] == ["acct_B"]
    assert await store.list_accounts_page(AccountQuery(limit=10, external_id="u3")) == []
    # with a query as well, both must hold
    both = AccountQuery(limit=10, pid="acct_A", external_id="u2")
    assert await store.list_accounts_page(both) == []
    mine = AccountQuery(limit=10, pid="acct_B", external_id="u2", after=(3, "acct_C"))
    assert [a.pid for a in await store.list_accounts_page(mine)] == ["acct_B"]


async def test_accounts_from_before_version_18_have_none(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:17])
    old = database.open()
    await old.migrate()
    await old.close()
    await database.execute(
        "INSERT INTO accounts (pid, created_at, status) VALUES ('acct_old', 5, 'active')"
    )
    monkeypatch.undo()
    s = database.open()
    try:
        await s.migrate()
        assert await s.get_account("acct_old") == _account("acct_old", created_at=5)
        assert await s.create_account(_account("acct_new", "u1", created_at=6))
        assert not await s.create_account(_account("acct_new2", "u1", created_at=7))
    finally:
        await s.close()
