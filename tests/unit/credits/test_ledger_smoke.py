from pathlib import Path

import pytest
from redis.asyncio.cluster import RedisCluster

from app.core.errors import ScriptLoadError
from app.credits.outcomes import Hold, Identity, ScriptStatus
from app.credits.scripts import expand_includes, load_script_sources
from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import rec
from tests.support.valkey_cluster import other_primary


async def test_reserve_settle_round_trip(ledger: Ledgers, clock: Clock) -> None:
    pid, kid = "acct_A", "K" * 12
    ident = Identity(pid, kid, "live", ledger.layout.shard(pid))
    assert (await ledger.money.open_account(pid, purchased=1000)).status is ScriptStatus.OK
    assert (
        await ledger.keys.put_key(ident, rec(ident, status="active", cap=None, name="k"))
    ).status is ScriptStatus.OK
    hold = await ledger.holds.reserve(
        ident,
        rid="r1",
        now=clock(),
        prompt_units=1000,
        output_price=15,
        max_out=100,
        min_out=16,
        deadline=clock() + 60,
        alias="svc-fast",
        requested="svc-fast",
        models="svc-fast",
    )
    assert isinstance(hold, Hold), hold
    assert hold.amount == 3  # ceil((1000 + 1500) / 1000)
    assert hold.balance == 997
    done = await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=2,
        prompt_tokens=200,
        completion_tokens=40,
        outcome="completed",
    )
    assert done.status is ScriptStatus.OK
    assert (done.credits_used, done.balance) == (2, 998)
    again = await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=2,
        prompt_tokens=200,
        completion_tokens=40,
        outcome="completed",
    )
    assert again.status is ScriptStatus.NOT_FOUND


async def _config_set(redis: RedisClient, name: str, value: str) -> None:
    """Set a parameter on the server, or on one primary of a cluster (not the default node)."""
    if isinstance(redis, RedisCluster):
        await redis.config_set(name, value, target_nodes=other_primary(redis))
    else:
        await redis.config_set(name, value)


async def test_an_evicting_redis_is_refused_unless_allowed(real_redis: RedisClient) -> None:
    from app.core.errors import StartupError
    from app.kv.startup_checks import check_eviction_policy

    await check_eviction_policy(real_redis, allow=False)  # noeviction: fine
    await _config_set(real_redis, "maxmemory-policy", "allkeys-lru")
    try:
        with pytest.raises(StartupError, match="allkeys-lru"):
            await check_eviction_policy(real_redis, allow=False)
        await check_eviction_policy(real_redis, allow=True)
    finally:
        await _config_set(real_redis, "maxmemory-policy", "noeviction")


async def test_scripts_are_reloaded_after_a_script_flush(real_redis: RedisClient) -> None:
    ledger = Ledgers(real_redis, KeySpace("svc", 64), cap_ttl_s=10, usage_ttl_s=10)
    await ledger.scripts.load()
    await real_redis.script_flush()
    assert await ledger.scripts.loaded()  # missing ones were loaded again


async def test_a_script_flushed_again_during_its_reload_still_runs(
    real_redis: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledgers(real_redis, KeySpace("svc", 64), cap_ttl_s=10, usage_ttl_s=10)
    load = real_redis.script_load

    async def load_then_flush(script: str) -> str:  # another SCRIPT FLUSH lands right after
        sha: str = await load(script)
        await real_redis.script_flush()
        return sha

    monkeypatch.setattr(real_redis, "script_load", load_then_flush)
    await real_redis.script_flush()
    assert (
        await ledger.money.open_account("acct_F", purchased=10)
    ).status is ScriptStatus.OK  # NOSCRIPT twice, then EVAL
    ident = Identity("acct_F", "F" * 12, "live", ledger.layout.shard("acct_F"))
    assert (
        await ledger.keys.put_key(ident, rec(ident, status="active", cap=None, name="k"))
    ).status is ScriptStatus.OK
    status, balance = await ledger.money.balance(ident, 1_780_000_000.0)
    assert (status, balance.total) == (ScriptStatus.OK, 10)


def test_includes_are_expanded_once_and_an_unknown_one_fails_the_load(tmp_path: Path) -> None:
    sources = load_script_sources()
    for name, source in sources.items():
        assert "--- @include" not in source, name
        assert source.count("local function count(") == 1, name  # lib/checks.lua, once
    # reserve names lib/checks.lua itself and through lib/keys.lua: defined once
    assert sources["reserve"].count("local function key_record(") == 1
    assert sources["reserve"].startswith("--[[\nreserve:")  # its header comes first
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "a.lua").write_text('--- @include "lib/b.lua"\nlocal a = 1\n')
    (tmp_path / "lib" / "b.lua").write_text("local b = 2\n")
    twice = '--- @include "lib/a.lua"\n--- @include "lib/b.lua"\nreturn a + b\n'
    expanded = expand_includes(twice, tmp_path)
    assert expanded.count("local b = 2") == 1
    assert expanded.index("local b = 2") < expanded.index("local a = 1")
    with pytest.raises(ScriptLoadError, match=r"no such include: lib/missing\.lua"):
        expand_includes('--- @include "lib/missing.lua"\n', tmp_path)
