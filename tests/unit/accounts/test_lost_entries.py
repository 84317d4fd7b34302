"""Ledger entries a Redis failover lost (issue 48 item 2): Redis is put back to what it held
before the last entries (what a replica that had not received them holds once promoted);
the recheck finds each applied entry whose marker is gone and applies it again, once, and
reconcile is clean after. On the real Valkey and the Cluster (DUMP/RESTORE)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.accounts.lost_entries import FIRST_WINDOW_S
from app.kv.client import RedisClient
from tests.unit.purchases.test_purchase_ledger import Shop, _shop


@pytest.fixture
async def shop(real_redis: RedisClient, tmp_path: Path) -> AsyncIterator[Shop]:
    made = await _shop(real_redis, tmp_path)
    yield made
    await made.store.close()


async def _snapshot(redis: RedisClient) -> dict[Any, tuple[bytes, int]]:
    """Every key's DUMP and remaining life (ms; 0: none)."""
    found: dict[Any, tuple[bytes, int]] = {}
    async for name in redis.scan_iter(count=1000):
        dumped = await redis.dump(name)
        if dumped is not None:
            found[name] = (dumped, max(await redis.pttl(name), 0))
    return found


async def _put_back(redis: RedisClient, snapshot: dict[Any, tuple[bytes, int]]) -> None:
    """Redis as it was at the snapshot: the writes since then lost."""
    await redis.flushall()
    for name, (dumped, ttl_ms) in snapshot.items():
        await redis.restore(name, ttl_ms, dumped, replace=True)


async def test_entries_a_failover_lost_are_applied_again_once(shop: Shop) -> None:
    pid = await shop.accounts.create_account()
    await shop.accounts.grant_purchased(pid, 1000)
    snapshot = await _snapshot(shop.redis)
    await shop.accounts.grant_purchased(pid, 500, reason="lost with the primary")
    await shop.accounts.debit(pid, 1700, reason="lost too, owed in part")
    assert await shop.balance(pid) == (0, 200)
    await _put_back(shop.redis, snapshot)
    assert await shop.balance(pid) == (1000, 0)
    assert await shop.drift() > 0

    assert await shop.ledger.lost.recheck() == 2
    assert await shop.balance(pid) == (0, 200)  # applied again, in their order
    assert await shop.ledger.lost.recheck() == 0  # present now: never twice
    assert await shop.drift() == 0


async def test_a_round_rechecks_everything_when_redis_went_back_past_its_window(
    shop: Shop,
) -> None:
    pid = await shop.accounts.create_account()
    snapshot = await _snapshot(shop.redis)
    await shop.accounts.grant_purchased(pid, 300)
    shop.clock.advance(FIRST_WINDOW_S)
    assert await shop.ledger.lost.recheck() == 0  # a round: nothing lost yet
    shop.clock.advance(3600)
    assert await shop.ledger.lost.recheck() == 0  # the grant is older than this window
    # Redis restarted from a copy older than the grant, an hour after it applied: the round
    # finds the newest entry it had seen gone, so it looks at every entry, not its window
    await _put_back(shop.redis, snapshot)
    assert await shop.balance(pid) == (0, 0)
    assert await shop.ledger.lost.recheck() == 1
    assert await shop.balance(pid) == (300, 0)
    assert await shop.ledger.lost.recheck() == 0
    assert await shop.drift() == 0


async def test_repair_rechecks_every_applied_entry(shop: Shop) -> None:
    pid = await shop.accounts.create_account()
    snapshot = await _snapshot(shop.redis)
    await shop.accounts.grant_purchased(pid, 300)
    shop.clock.advance(FIRST_WINDOW_S + 3600)
    await _put_back(shop.redis, snapshot)
    assert await shop.balance(pid) == (0, 0)
    assert await shop.ledger.lost.recheck_since(0) == 1  # `reconcile --repair`'s: all of them
    assert await shop.balance(pid) == (300, 0)
    assert await shop.drift() == 0
