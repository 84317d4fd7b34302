"""``rebuild-redis --force`` against a grant in flight (issue 44 item 3, the review's
item 1): a grant writes its ledger entry (pending: not counted), then Redis, then marks the
entry applied (counted), so a read between Redis and the mark sees a difference the mark
removes. The correction is confirmed by a second read before it is written: the grant is
neither taken away nor added twice. Each interleaving is forced: the grant's mark (or its
script) waits until the rebuild has read."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.unit.ops.test_redis_loss import PURCHASED, REWARD, Loss

pytest_plugins = ["tests.unit.ops.test_redis_loss"]


class Gate:
    """Holds one call of ``target.name`` until ``open``; ``reached`` is set when the call
    arrives (the grant's first write is done by then)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, target: object, name: str) -> None:
        self.reached = asyncio.Event()
        self.opened = asyncio.Event()
        self.done = asyncio.Event()
        real: Callable[..., Awaitable[Any]] = getattr(target, name)

        async def held(*args: Any, **kwargs: Any) -> Any:
            self.reached.set()
            await self.opened.wait()
            try:
                return await real(*args, **kwargs)
            finally:
                self.done.set()

        monkeypatch.setattr(target, name, held)

    async def release(self) -> None:
        """Let the held call run (once: a second release only waits for it)."""
        self.opened.set()
        await self.done.wait()


def on_call(
    monkeypatch: pytest.MonkeyPatch,
    target: object,
    name: str,
    number: int,
    before: Callable[[], Awaitable[None]] | None = None,
    after: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run ``before``/``after`` around the ``number``-th call of ``target.name``."""
    real: Callable[..., Awaitable[Any]] = getattr(target, name)
    calls = 0

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        mine = calls == number
        if mine and before:
            await before()
        result = await real(*args, **kwargs)
        if mine and after:
            await after()
        return result

    monkeypatch.setattr(target, name, wrapped)


async def _settled(loss: Loss, pid: str, task: asyncio.Task[Any]) -> None:
    await task
    assert await loss.redis_total(pid) == await loss.ledger_total(pid)
    assert (await loss.reconcile()).accounts_with_drift == 0


@pytest.mark.parametrize("row_lands", ["before the second read", "before the grants check"])
async def test_a_reward_in_flight_is_not_taken_away(
    loss: Loss, monkeypatch: pytest.MonkeyPatch, row_lands: str
) -> None:
    """The reward's grant.lua lands before the shard is read, its entry's mark after the
    snapshot: Redis is over the ledger by the reward until the mark lands."""
    pid = await loss.accounts.create_account()
    await loss.accounts.grant_purchased(pid, PURCHASED)
    row = Gate(monkeypatch, loss.store, "mark_applied")
    task: list[asyncio.Task[Any]] = []

    async def reward_reaches_redis() -> None:
        task.append(asyncio.create_task(loss.spotlights.reward(pid, "view-1")))
        await row.reached.wait()

    on_call(monkeypatch, loss.store, "ledger_snapshot", 1, after=reward_reaches_redis)
    if row_lands == "before the second read":
        on_call(monkeypatch, loss.store, "ledger_snapshot", 2, before=row.release)
    else:
        on_call(monkeypatch, loss.store, "list_grants", 1, before=row.release)
    # (without a second read, the row lands once the correction is written)
    on_call(monkeypatch, loss.ledger.money, "correct_pools", 1, after=row.release)
    done = await loss.rebuild(force=True)
    await _settled(loss, pid, task[0])
    assert await loss.redis_total(pid) == PURCHASED + REWARD
    assert done.accounts_recomputed == 0
    assert done.accounts_changing == ([pid] if row_lands != "before the second read" else [])


async def test_a_purchase_in_flight_is_not_added_twice(
    loss: Loss, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The purchase's entry is written (pending) before the snapshot, its grant.lua runs
    after the rebuild: a pending entry is counted by neither side, so the rebuild finds
    nothing to correct, and the purchase lands once."""
    pid = await loss.accounts.create_account()
    await loss.accounts.grant_purchased(pid, PURCHASED)
    script = Gate(monkeypatch, loss.ledger.money, "grant")
    task: list[asyncio.Task[Any]] = []

    async def row_written() -> None:
        task.append(asyncio.create_task(loss.accounts.grant_purchased(pid, 100)))
        await script.reached.wait()

    on_call(monkeypatch, loss.store, "ledger_snapshot", 1, before=row_written)
    done = await loss.rebuild(force=True)
    assert done.accounts_recomputed == 0
    await script.release()
    await _settled(loss, pid, task[0])
    assert await loss.redis_total(pid) == PURCHASED + 100


async def test_a_difference_that_holds_is_corrected_after_the_second_read(
    loss: Loss, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No grant in flight: the drift reconcile flags is the same in both reads and
    corrected (the two reads are ``confirm_s`` apart)."""
    pid = await loss.accounts.create_account()
    await loss.accounts.grant_purchased(pid, PURCHASED)
    name = loss.layout.account(loss.layout.shard(pid), pid)
    await loss.redis.hset(name, "purchased", 7)
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr("app.ops.recompute.asyncio.sleep", sleep)
    done = await loss.rebuild(force=True, confirm_s=1.5)
    assert slept == [1.5]
    assert (done.accounts_recomputed, done.credits_recomputed) == (1, PURCHASED - 7)
    assert done.accounts_changing == []
    assert await loss.redis_total(pid) == PURCHASED
