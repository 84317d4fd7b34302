"""The operators' audit log in the store (issue 45 item 4), on a SQLite file and on a real
PostgreSQL database: an entry commits with the change it records or not at all, pages
newest first per account or overall, and a grant keeps its reason."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.core.errors import StoreConflict, StoreError
from app.store import AccountRecord, AuditQuery, AuditRecord, GrantRecord, KeyRecord, Store
from app.store.audit import new_seq, seq_of
from tests.support.databases import Database


@pytest.fixture
async def store(database: Database) -> AsyncIterator[Store]:
    s = database.open()
    await s.migrate()
    await s.create_account(AccountRecord(pid="acct_A", created_at=1))
    await s.create_account(AccountRecord(pid="acct_B", created_at=2))
    yield s
    await s.close()


def _entry(pid: str, action: str, target: str | None = None, seq: int | None = None) -> AuditRecord:
    return AuditRecord(
        seq=new_seq() if seq is None else seq,
        account_pid=pid,
        action=action,
        target=target,
        actor="admin_api",
        request_id="req_1",
        client_address="203.0.113.9",
        details='{"credits": 5}',
        created_at=100,
    )


def _grant(grant_id: str, reason: str | None = None) -> GrantRecord:
    return GrantRecord(
        grant_id=grant_id,
        account_pid="acct_A",
        pool="purchased",
        credits=5,
        source="admin",
        reference=None,
        created_at=100,
        reason=reason,
    )


def _key(kid: str) -> KeyRecord:
    return KeyRecord(
        kid=kid,
        account_pid="acct_A",
        name="k",
        environment="live",
        daily_cap_credits=None,
        secret_hash="h",
        last4="wxyz",
        created_at=100,
    )


async def _all(store: Store, pid: str | None = None) -> list[AuditRecord]:
    return await store.list_audit(AuditQuery(limit=100, account_pid=pid))


async def test_a_grant_keeps_its_reason_and_writes_its_entry_once(store: Store) -> None:
    entry = _entry("acct_A", "credits.grant", "grant_1")
    assert await store.insert_grant(_grant("grant_1", "order 42"), audit=entry)
    again = _entry("acct_A", "credits.grant", "grant_1")
    assert not await store.insert_grant(_grant("grant_1", "order 42"), audit=again)
    found = await store.get_grant("grant_1")
    assert found is not None
    assert found.reason == "order 42"
    assert await _all(store) == [entry]
    assert await store.get_audit(entry.seq) == entry


async def test_a_grant_taken_back_takes_its_entry(store: Store) -> None:
    await store.insert_grant(_grant("grant_1"), audit=_entry("acct_A", "credits.grant", "grant_1"))
    kept = _entry("acct_A", "credits.grant", "grant_2")
    await store.insert_grant(_grant("grant_2"), audit=kept)
    assert await store.delete_grant("grant_1")
    assert await _all(store) == [kept]


async def test_an_entry_that_cannot_be_written_fails_its_change(store: Store) -> None:
    """The entry and the change commit together: a failed entry (here its seq taken)
    leaves the grant unwritten, so no action is done unaudited."""
    first = _entry("acct_A", "credits.grant", "grant_1")
    await store.insert_grant(_grant("grant_1"), audit=first)
    with pytest.raises(StoreError):
        await store.insert_grant(
            _grant("grant_2"), audit=_entry("acct_A", "credits.grant", "grant_2", seq=first.seq)
        )
    assert await store.get_grant("grant_2") is None
    assert await _all(store) == [first]


async def test_only_a_change_that_happens_is_audited(store: Store) -> None:
    await store.insert_key(_key("k1"), audit=_entry("acct_A", "key.create", "key_k1"))
    assert await store.revoke_key("acct_A", "k1", 200, _entry("acct_A", "key.revoke", "key_k1"))
    # a repeated revocation, and one of another account's key, change nothing
    await store.revoke_key("acct_A", "k1", 300, _entry("acct_A", "key.revoke", "key_k1"))
    await store.revoke_key("acct_B", "k1", 300, _entry("acct_B", "key.revoke", "key_k1"))
    await store.update_key("acct_B", "k1", {"name": "x"}, _entry("acct_B", "key.update"))
    assert await store.set_account_status("acct_X", "disabled", _entry("acct_X", "x")) is None
    assert [e.action for e in await _all(store)] == ["key.revoke", "key.create"]


async def test_a_half_made_account_goes_with_its_entry(store: Store) -> None:
    await store.create_account(
        AccountRecord(pid="acct_C", created_at=3), _entry("acct_C", "account.create", "acct_C")
    )
    assert [e.action for e in await _all(store, "acct_C")] == ["account.create"]
    assert await store.delete_new_account("acct_C")
    assert await _all(store) == []


async def test_pages_newest_first_overall_and_per_account(store: Store) -> None:
    written = []
    for n in range(5):
        pid = "acct_A" if n % 2 == 0 else "acct_B"
        entry = _entry(pid, "account.disable", pid)
        written.append(entry)
        await store.set_account_status(pid, "disabled", entry)
    newest_first = written[::-1]
    assert await _all(store) == newest_first
    page = await store.list_audit(AuditQuery(limit=2, after=newest_first[1].seq))
    assert page == newest_first[2:4]
    mine = await store.list_audit(AuditQuery(limit=10, account_pid="acct_A"))
    assert mine == [e for e in newest_first if e.account_pid == "acct_A"]
    assert seq_of(mine[0].id) == mine[0].seq
    assert seq_of("audit_x1") is None
    assert seq_of("key_1") is None


async def test_a_creation_whose_external_id_is_taken_writes_no_entry(store: Store) -> None:
    first = _entry("acct_C", "account.create", "acct_C")
    assert await store.create_account(
        AccountRecord(pid="acct_C", created_at=3, external_id="user-1"), first
    )
    taken = _entry("acct_D", "account.create", "acct_D")
    assert not await store.create_account(
        AccountRecord(pid="acct_D", created_at=4, external_id="user-1"), taken
    )
    assert await store.get_account("acct_D") is None
    assert await _all(store) == [first]


async def test_an_external_id_set_writes_its_entry_and_a_refused_one_none(store: Store) -> None:
    await store.set_external_id("acct_A", "user-1", _entry("acct_A", "account.update", "acct_A"))
    set_b = _entry("acct_B", "account.update", "acct_B")
    with pytest.raises(StoreConflict):
        await store.set_external_id("acct_B", "user-1", set_b)
    assert await store.set_external_id("acct_X", "user-2", _entry("acct_X", "x")) is None
    assert [(e.account_pid, e.action) for e in await _all(store)] == [("acct_A", "account.update")]
