"""An account's status in the operators' tools (issue 33 item 3): it is durable, so
``rebuild-redis`` restores it (a disabled account stays disabled after a Redis loss),
``reconcile`` reports a Redis that says otherwise than the store, ``rebuild-redis --force``
corrects it, and ``inspect`` shows it. On the real Valkey and Cluster, over SQLite and
PostgreSQL (``test_reconcile``'s world)."""

from __future__ import annotations

import pytest

from app.accounts.lookup import AccountFilter
from app.core.errors import ApiError, ErrorKind
from app.kv.fields import ACCOUNT_ACTIVE, ACCOUNT_DISABLED, AccountField
from app.ops.inspect import inspect_account
from app.ops.rebuild import RebuildReport, rebuild_redis
from tests.unit.ops.test_reconcile import DAY, World, _key, _reconcile, _request, store, world

__all__ = ["store", "world"]  # the fixtures this module borrows


async def _rebuild(w: World, *, force: bool = False) -> RebuildReport:
    return await rebuild_redis(
        w.ledger.money,
        w.ledger.keys,
        w.ledger.usage,
        w.store,
        now=w.clock(),
        earned_ttl_s=2 * DAY,
        force=force,
    )


async def _funded(w: World, name: str) -> str:
    pid = await w.accounts.create_account()
    await w.accounts.grant_purchased(pid, 1_000)
    await _key(w, pid, name)
    return pid


async def test_a_disabled_account_stays_disabled_through_a_rebuild(world: World) -> None:
    off = await _funded(world, "off")
    await _funded(world, "on")
    assert (await world.accounts.set_status(off, ACCOUNT_DISABLED)).status == ACCOUNT_DISABLED
    with pytest.raises(ApiError) as refused:
        await _request(world, "off", "r1", 5)
    assert refused.value.kind is ErrorKind.ACCOUNT_DISABLED
    await world.redis.flushall()
    done = await _rebuild(world)
    assert (done.accounts_restored, done.disabled_accounts) == (2, 1)
    with pytest.raises(ApiError) as still:
        await _request(world, "off", "r2", 5)
    assert still.value.kind is ErrorKind.ACCOUNT_DISABLED
    await _request(world, "on", "r3", 5)  # the other account is served
    report = await inspect_account(world.redis, world.layout, world.store, off, world.clock)
    assert report.status == ACCOUNT_DISABLED
    assert all(k.id.startswith("key_") for k in report.keys)
    await world.accounts.set_status(off, ACCOUNT_ACTIVE)
    await _request(world, "off", "r4", 5)
    assert (await _reconcile(world)).accounts_with_drift == 0


async def test_reconcile_reports_a_status_redis_has_wrong_and_force_corrects_it(
    world: World,
) -> None:
    pid = await _funded(world, "k")
    await world.accounts.set_status(pid, ACCOUNT_DISABLED)
    name = world.layout.account(world.layout.shard(pid), pid)
    await world.redis.hset(name, AccountField.STATUS, ACCOUNT_ACTIVE)  # as a lost write leaves it
    report = await _reconcile(world)
    (check,) = [c for c in report.accounts if c.account_pid == pid]
    assert check.status == "drift"
    assert check.balance_drift == 0
    assert check.redis is not None
    assert check.ledger is not None
    assert (check.redis.status, check.ledger.status) == (ACCOUNT_ACTIVE, ACCOUNT_DISABLED)
    done = await _rebuild(world, force=True)
    assert (done.accounts_kept, done.statuses_corrected) == (1, 1)
    assert await world.redis.hget(name, AccountField.STATUS) == b"disabled"
    assert (await _reconcile(world)).accounts_with_drift == 0
    found = await world.accounts.find_accounts(AccountFilter(pid=pid))
    assert [(a.id, a.status) for a in found.data] == [(pid, ACCOUNT_DISABLED)]


async def test_inspect_shows_a_lost_hash_as_missing(world: World) -> None:
    pid = await _funded(world, "k")
    await world.redis.delete(world.layout.account(world.layout.shard(pid), pid))
    report = await inspect_account(world.redis, world.layout, world.store, pid, world.clock)
    assert (report.status, report.purchased) == ("missing", 0)
    # a status change on it writes the store; Redis keeps no partial hash
    assert (await world.accounts.set_status(pid, ACCOUNT_DISABLED)).status == ACCOUNT_DISABLED
    assert not await world.redis.exists(world.layout.account(world.layout.shard(pid), pid))
