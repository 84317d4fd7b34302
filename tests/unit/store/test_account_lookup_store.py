"""The operators' account lookups in the store (issue 33 item 3), on a SQLite file and on a
real PostgreSQL database: pages of accounts newest first, found by account id, key id or a
key's last four characters, and the account's status."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.store import AccountQuery, AccountRecord, KeyRecord, Store
from tests.support.databases import Database


@pytest.fixture
async def store(database: Database) -> AsyncIterator[Store]:
    """Five accounts, one a second (acct_1 oldest), and two that share a second; keys:
    acct_2 has k2a (last4 'AbCd') and k2b, acct_4 has k4a (last4 'AbCd' too)."""
    s = database.open()
    await s.migrate()
    for n, created in ((1, 10), (2, 20), (3, 30), (4, 40), (5, 40)):
        await s.create_account(AccountRecord(pid=f"acct_{n}", created_at=created))
    for kid, pid, last4 in (
        ("k2a000000000", "acct_2", "AbCd"),
        ("k2b000000000", "acct_2", "wxyz"),
        ("k4a000000000", "acct_4", "AbCd"),
    ):
        await s.insert_key(
            KeyRecord(
                kid=kid,
                account_pid=pid,
                name="k",
                environment="live",
                daily_cap_credits=None,
                secret_hash="h",
                last4=last4,
                created_at=50,
            )
        )
    yield s
    await s.close()


def _pids(records: list[AccountRecord]) -> list[str]:
    return [r.pid for r in records]


async def test_accounts_page_newest_first_then_by_id(store: Store) -> None:
    everything = await store.list_accounts_page(AccountQuery(limit=10))
    assert _pids(everything) == ["acct_5", "acct_4", "acct_3", "acct_2", "acct_1"]
    first = await store.list_accounts_page(AccountQuery(limit=2))
    assert _pids(first) == ["acct_5", "acct_4"]
    after = (first[-1].created_at, first[-1].pid)
    second = await store.list_accounts_page(AccountQuery(limit=2, after=after))
    assert _pids(second) == ["acct_3", "acct_2"]
    last = await store.list_accounts_page(AccountQuery(limit=2, after=(20, "acct_2")))
    assert _pids(last) == ["acct_1"]
    # a tie on the second is broken by the id: the page after acct_5 starts at acct_4
    tied = await store.list_accounts_page(AccountQuery(limit=1, after=(40, "acct_5")))
    assert _pids(tied) == ["acct_4"]


@pytest.mark.parametrize(
    ("query", "found"),
    [
        (AccountQuery(limit=10, pid="acct_3"), ["acct_3"]),
        (AccountQuery(limit=10, pid="acct_9"), []),
        (AccountQuery(limit=10, kid="k2b000000000"), ["acct_2"]),
        (AccountQuery(limit=10, kid="k9x000000000"), []),
        (AccountQuery(limit=10, last4="AbCd"), ["acct_4", "acct_2"]),
        (AccountQuery(limit=10, last4="abcd"), []),  # case matters: keys are base62
        (AccountQuery(limit=10, last4="wxyz"), ["acct_2"]),
        # a query that may be several things lists what any of them finds, once each
        (
            AccountQuery(limit=10, pid="acct_4", kid="k2a000000000", last4="wxyz"),
            ["acct_4", "acct_2"],
        ),
        (AccountQuery(limit=1, last4="AbCd", after=(40, "acct_4")), ["acct_2"]),
    ],
)
async def test_accounts_found_by_id_key_or_last4(
    store: Store, query: AccountQuery, found: list[str]
) -> None:
    assert _pids(await store.list_accounts_page(query)) == found


async def test_an_account_status_is_durable(store: Store, database: Database) -> None:
    assert (await store.get_account("acct_2")).status == "active"  # type: ignore[union-attr]
    disabled = await store.set_account_status("acct_2", "disabled")
    assert disabled is not None
    assert disabled.status == "disabled"
    reopened = database.open()
    try:
        assert (await reopened.get_account("acct_2")).status == "disabled"  # type: ignore[union-attr]
        listed = await reopened.list_accounts_page(AccountQuery(limit=10, pid="acct_2"))
        assert [r.status for r in listed] == ["disabled"]
    finally:
        await reopened.close()
    enabled = await store.set_account_status("acct_2", "active")
    assert enabled is not None
    assert enabled.status == "active"
    assert await store.set_account_status("acct_nope", "disabled") is None


async def test_the_lookups_have_their_indexes(database: Database, store: Store) -> None:
    if database.driver == "sqlite":
        rows = await database.query("SELECT name FROM sqlite_master WHERE type = 'index'")
    else:
        rows = await database.query("SELECT indexname FROM pg_indexes")
    assert {"accounts_created", "api_keys_last4"} <= {str(name) for (name,) in rows}
