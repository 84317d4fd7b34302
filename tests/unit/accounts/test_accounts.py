"""Account and key operations over fakeredis/Valkey and a real SQLite file."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.accounts.accounts import Accounts
from app.accounts.answers import ApiKeyCreated
from app.accounts.api_keys import ApiKeys
from app.accounts.bodies import KeyCreateRequest, KeyUpdateRequest
from app.core.clock import parse_iso_utc
from app.core.errors import ApiError, ErrorKind
from app.credits.outcomes import ScriptStatus
from app.keys.format import digest
from app.store import Store
from tests.support.ledgers import Ledgers


async def test_active_key_limit(store: Store, ledger: Ledgers) -> None:
    accounts = Accounts(store, ledger.money)
    api_keys = ApiKeys(store, ledger.keys, accounts, b"p", max_active_keys=2)
    pid = await accounts.create_account()
    first = await api_keys.create_key(
        pid, KeyCreateRequest(name="a", environment="live", daily_cap_credits=None)
    )
    await api_keys.create_key(
        pid, KeyCreateRequest(name="b", environment="test", daily_cap_credits=5)
    )
    with pytest.raises(ApiError) as info:
        await api_keys.create_key(
            pid, KeyCreateRequest(name="c", environment="live", daily_cap_credits=None)
        )
    assert info.value.kind is ErrorKind.KEY_LIMIT
    await api_keys.revoke_key(pid, first.id)
    await api_keys.create_key(
        pid, KeyCreateRequest(name="c", environment="live", daily_cap_credits=None)
    )
    listed = await api_keys.list_keys(pid)
    assert [k.name for k in listed.data] == ["c", "b", "a"]
    assert [k.status for k in listed.data] == ["active", "active", "revoked"]


async def test_revoke_is_scoped_and_immediate(store: Store, ledger: Ledgers) -> None:
    accounts = Accounts(store, ledger.money)
    api_keys = ApiKeys(store, ledger.keys, accounts, b"p")
    a, b = await accounts.create_account(), await accounts.create_account()
    key = await api_keys.create_key(
        a, KeyCreateRequest(name="a", environment="live", daily_cap_credits=None)
    )
    for pid, key_id in [(b, key.id), (a, "key_unknownunkn"), (a, "bad")]:
        with pytest.raises(ApiError) as info:
            await api_keys.revoke_key(pid, key_id)
        assert info.value.kind is ErrorKind.API_KEY_NOT_FOUND
    deleted = await api_keys.revoke_key(a, key.id)
    assert (deleted.id, deleted.deleted) == (key.id, True)
    ident = await ledger.keys.lookup_digest(digest(b"p", key.key))
    assert ident is not None
    assert await ledger.keys.key_status(ident, time.time()) is ScriptStatus.KEY_REVOKED
    record = await store.get_key(key.id.removeprefix("key_"))
    assert record is not None
    assert record.status == "revoked"


async def test_grants_need_an_account(store: Store, ledger: Ledgers) -> None:
    accounts = Accounts(store, ledger.money)
    with pytest.raises(ApiError) as info:
        await accounts.grant_purchased("acct_missing", 5)
    assert info.value.kind is ErrorKind.ACCOUNT_NOT_FOUND
    pid = await accounts.create_account()
    balance = await accounts.grant_purchased(pid, 5, grant_id="g1")
    again = await accounts.grant_purchased(pid, 5, grant_id="g1")
    assert (balance.total_available, again.total_available) == (5, 5)
    assert [g.credits for g in await store.list_grants(pid)] == [5]


async def test_concurrent_updates_lose_no_field_and_leave_redis_as_the_store(
    store: Store, ledger: Ledgers
) -> None:
    accounts = Accounts(store, ledger.money)
    api_keys = ApiKeys(store, ledger.keys, accounts, b"p")
    pid = await accounts.create_account()
    key = await api_keys.create_key(
        pid, KeyCreateRequest(name="a", environment="live", daily_cap_credits=None)
    )
    names = [KeyUpdateRequest(name=f"n{i}") for i in range(10)]
    caps = [KeyUpdateRequest(daily_cap_credits=i) for i in range(10)]
    await asyncio.gather(*(api_keys.update_key(pid, key.id, u) for u in names + caps))
    record = await store.get_key(key.id.removeprefix("key_"))
    assert record is not None
    assert record.name.startswith("n")  # a name and a cap were both kept
    assert record.daily_cap_credits is not None
    ident = await ledger.keys.lookup_digest(digest(b"p", key.key))
    assert ident is not None
    hot = await ledger.redis.hgetall(ledger.layout.api_key(ident.shard, ident.kid))
    assert (hot[b"name"].decode(), int(hot[b"cap"])) == (record.name, record.daily_cap_credits)
    with pytest.raises(ApiError) as other:
        await api_keys.update_key(await accounts.create_account(), key.id, names[0])
    assert other.value.kind is ErrorKind.API_KEY_NOT_FOUND


async def test_a_rotation_keeps_the_expiry(store: Store, ledger: Ledgers) -> None:
    """Issue 44, item 10: a successor inherits ``expires_at``: an operator's rotation does not
    lift it, and an admin key with an expiry may rotate itself (its successor stays within
    it)."""
    now = 1_780_000_000.0  # 2026-05-28
    accounts = Accounts(store, ledger.money, clock=lambda: now)
    api_keys = ApiKeys(store, ledger.keys, accounts, b"p", clock=lambda: now)
    pid = await accounts.create_account()
    expiry = "2026-06-30T00:00:00Z"
    made = await api_keys.create_key(
        pid,
        KeyCreateRequest(
            name="a", environment="live", daily_cap_credits=None, expires_at=expiry, role="admin"
        ),
    )
    at_expiry = made_expiry(expiry)

    async def check(rotated: ApiKeyCreated) -> None:
        assert rotated.expires_at == expiry
        record = await store.get_key(rotated.id.removeprefix("key_"))
        assert record is not None
        assert record.expires_at == at_expiry
        ident = await ledger.keys.lookup_digest(digest(b"p", rotated.key))
        assert ident is not None
        assert await ledger.keys.key_status(ident, at_expiry - 1) is ScriptStatus.OK
        assert await ledger.keys.key_status(ident, at_expiry) is ScriptStatus.KEY_EXPIRED

    by_operator = await api_keys.rotate_key(pid, made.id, 60)
    await check(by_operator)
    own = await api_keys.caller(pid, by_operator.id.removeprefix("key_"))
    await check(await api_keys.rotate_key(pid, by_operator.id, 0, granter=own))


def made_expiry(text: str) -> int:
    seconds = parse_iso_utc(text)
    assert seconds is not None
    return seconds
