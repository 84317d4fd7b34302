"""The durable store on a real SQLite file."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.store import (
    AccountRecord,
    GrantRecord,
    KeyRecord,
    Store,
    UsageRollup,
    open_store,
)
from app.store.schema import stream_id_key


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'svc.db'}")
    await s.migrate()
    yield s
    await s.close()


def _key(kid: str, pid: str, created_at: int) -> KeyRecord:
    return KeyRecord(
        kid=kid,
        account_pid=pid,
        name=f"k-{kid}",
        environment="live",
        daily_cap_credits=None,
        secret_hash="$argon2id$x",
        last4="abcd",
        created_at=created_at,
    )


def _use(
    pid: str, day: str, credits: int, env: str = "live", alias: str = "svc-fast"
) -> UsageRollup:
    return UsageRollup(
        account_pid=pid,
        kid="k1",
        day=day,
        alias=alias,
        environment=env,
        requests=1,
        prompt_tokens=10,
        completion_tokens=20,
        credits=credits,
    )


async def test_migrate_is_idempotent_and_safe_concurrently(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a' / 'svc.db'}"
    stores = [open_store(url) for _ in range(3)]
    await asyncio.gather(*(s.migrate() for s in stores))
    await stores[0].migrate()
    await stores[0].create_account(AccountRecord(pid="acct_1", created_at=1))
    assert await stores[2].get_account("acct_1") == AccountRecord(pid="acct_1", created_at=1)
    for s in stores:
        await s.close()


async def test_accounts_and_keys(store: Store) -> None:
    await store.create_account(AccountRecord(pid="acct_A", created_at=5))
    await store.create_account(AccountRecord(pid="acct_B", created_at=6))
    assert [a.pid for a in await store.list_accounts()] == ["acct_A", "acct_B"]
    assert await store.get_account("acct_none") is None
    await store.insert_key(_key("k1", "acct_A", 10))
    await store.insert_key(_key("k2", "acct_A", 20))
    await store.insert_key(_key("k3", "acct_B", 15))
    assert [k.kid for k in await store.list_keys("acct_A")] == ["k2", "k1"]
    assert await store.get_key("k3") == _key("k3", "acct_B", 15)
    assert await store.count_active_keys("acct_A") == 2
    with pytest.raises(sqlite3.IntegrityError):
        await store.create_account(AccountRecord(pid="acct_A", created_at=5))


async def test_revoke_is_scoped_to_the_account_and_idempotent(store: Store) -> None:
    await store.create_account(AccountRecord(pid="acct_A", created_at=1))
    await store.create_account(AccountRecord(pid="acct_B", created_at=1))
    await store.insert_key(_key("k1", "acct_A", 1))
    assert await store.revoke_key("acct_B", "k1", 50) is None
    assert (await store.get_key("k1")).status == "active"  # type: ignore[union-attr]
    first = await store.revoke_key("acct_A", "k1", 50)
    assert first is not None
    assert (first.status, first.revoked_at) == ("revoked", 50)
    again = await store.revoke_key("acct_A", "k1", 99)
    assert again == first  # keeps the first revocation time
    assert await store.count_active_keys("acct_A") == 0


async def test_grants_are_idempotent_by_id(store: Store) -> None:
    await store.create_account(AccountRecord(pid="acct_A", created_at=1))
    grant = GrantRecord(
        grant_id="g1",
        account_pid="acct_A",
        pool="purchased",
        credits=500,
        source="admin",
        reference=None,
        created_at=3,
    )
    assert await store.insert_grant(grant)
    assert not await store.insert_grant(GrantRecord(**{**_fields(grant), "credits": 9}))
    assert await store.get_grant("g1") == grant
    assert await store.list_grants("acct_A") == [grant]


def _fields(grant: GrantRecord) -> dict[str, object]:
    return {f: getattr(grant, f) for f in grant.__struct_fields__}


async def test_usage_applies_once_per_stream_position(store: Store) -> None:
    assert await store.get_cursor(3) is None
    assert await store.apply_usage(3, "1700000000000-5", [_use("acct_A", "2026-11-20", 7)])
    assert not await store.apply_usage(3, "1700000000000-5", [_use("acct_A", "2026-11-20", 7)])
    assert not await store.apply_usage(3, "1700000000000-4", [_use("acct_A", "2026-11-20", 7)])
    assert await store.apply_usage(3, "1700000000000-10", [_use("acct_A", "2026-11-20", 3)])
    assert await store.get_cursor(3) == "1700000000000-10"
    assert await store.apply_usage(4, "1-0", [_use("acct_A", "2026-11-21", 5)])
    await store.apply_usage(
        4,
        "2-0",
        [
            _use("acct_A", "2026-11-21", 100, env="test"),
            _use("acct_A", "2026-11-21", 1, alias="svc-code"),
        ],
    )
    daily = await store.usage_daily("acct_A", "2026-11-01")
    assert [(d.day, d.credits, d.requests) for d in daily] == [
        ("2026-11-21", 6, 2),
        ("2026-11-20", 10, 2),
    ]
    totals = await store.usage_totals("acct_A")
    assert totals is not None
    assert (totals.requests, totals.credits, totals.prompt_tokens) == (4, 16, 40)
    test_totals = await store.usage_totals("acct_A", environment="test")
    assert test_totals is not None
    assert test_totals.credits == 100
    assert await store.usage_totals("acct_none") is None


def test_stream_ids_compare_numerically() -> None:
    assert stream_id_key("1700000000000-5") < stream_id_key("1700000000000-10")
    assert stream_id_key("999-0") < stream_id_key("1000-0")


def test_open_store_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="sqlite"):
        open_store("mysql://x")
    absolute = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    assert absolute.path == tmp_path / "x.db"  # type: ignore[attr-defined]
    relative = open_store("sqlite:///rel/x.db")
    assert str(relative.path) == "rel/x.db"  # type: ignore[attr-defined]
