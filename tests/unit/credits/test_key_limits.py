"""A key's own limits inside the reserve script: its rate limit (a 60-second sliding window
shared by a rotation lineage) and the models it may use. Each refusal changes nothing."""

from __future__ import annotations

import random

import pytest

from app.core.errors import ApiError, ErrorKind
from app.credits.outcomes import Identity, Refusal, ScriptStatus
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, rec, reserve, reserved, snapshot

WINDOW_S = 60


async def _refusal(ledger: Ledgers, ident: Identity, rid: str, now: float) -> ApiError:
    before = await snapshot(ledger)
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, rid, now)
    assert await snapshot(ledger) == before  # nothing held, nothing counted
    return info.value


async def test_a_key_starts_at_most_its_rpm_in_any_60_seconds(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=10_000)
    ident = await key(ledger, "acct_A", "k1", rpm=3)
    start = clock()
    for n in range(3):
        await reserve(ledger, ident, f"r{n}", start + 10 * n)
    refused = await _refusal(ledger, ident, "r3", start + 30)
    assert (refused.kind, refused.status) == (ErrorKind.KEY_RATE_LIMITED, 429)
    # the first start is 60 s old 30 s later: to the millisecond
    assert refused.headers["retry-after-ms"] == "30000"
    assert refused.headers["retry-after"] == "30"
    late = await _refusal(ledger, ident, "r3", start + 59.75)
    assert late.headers["retry-after-ms"] == "250"
    assert late.headers["retry-after"] == "1"  # rounded up, never 0: a client would spin
    await reserve(ledger, ident, "r3", start + 60)
    # the slot freed is used: the next waits for the second start (t+10) to age
    wait = await _refusal(ledger, ident, "r4", start + 61)
    assert wait.headers["retry-after-ms"] == "9000"


async def test_no_burst_at_the_edge_of_a_minute(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=10_000)
    ident = await key(ledger, "acct_A", "k1", rpm=4)
    edge = 1_780_000_059.5  # half a second before a minute boundary
    for n in range(4):
        await reserve(ledger, ident, f"r{n}", edge + n * 0.1)
    # a fixed window would start afresh at :00; a sliding one waits the whole minute
    refused = await _refusal(ledger, ident, "r4", edge + 1)
    assert refused.headers["retry-after-ms"] == "59000"


async def test_refusals_do_not_count_and_other_keys_have_their_own_limit(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=5)
    ident = await key(ledger, "acct_A", "k1", rpm=1)
    other = await key(ledger, "acct_A", "k2", rpm=1)
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r1", clock(), max_out=10)  # 10 credits: too many
    assert info.value.kind is ErrorKind.INSUFFICIENT_CREDITS
    await reserve(ledger, ident, "r2", clock(), max_out=2)
    await reserve(ledger, other, "o1", clock(), max_out=2)
    refused = await _refusal(ledger, ident, "r3", clock())
    assert refused.kind is ErrorKind.KEY_RATE_LIMITED


async def test_a_key_without_a_limit_keeps_no_rate_log(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=10_000)
    ident = await key(ledger, "acct_A", "k1")
    for n in range(50):
        await reserve(ledger, ident, f"r{n}", clock(), max_out=1)
    assert await ledger.redis.exists(ledger.layout.rate(ident.shard, "k1")) == 0


async def test_the_log_expires_a_minute_after_the_last_start(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=10_000)
    ident = await key(ledger, "acct_A", "k1", rpm=600)
    await reserve(ledger, ident, "r1", clock())
    ttl_ms = await ledger.redis.pttl(ledger.layout.rate(ident.shard, "k1"))
    assert 0 < ttl_ms <= WINDOW_S * 1000


async def test_a_changed_limit_keeps_the_starts_of_the_last_minute(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=10_000)
    ident = await key(ledger, "acct_A", "k1", rpm=5)
    start = clock()
    for n in range(5):
        await reserve(ledger, ident, f"r{n}", start + n)
    # lowered to 2: the two newest starts (t+3, t+4) fill it until t+63
    await ledger.keys.update_key(ident, rec(ident, rpm=2))
    refused = await _refusal(ledger, ident, "x1", start + 10)
    assert refused.headers["retry-after-ms"] == str((3 + WINDOW_S - 10) * 1000)
    await reserve(ledger, ident, "r5", start + 63)
    # raised to 10 at t+64: of the last minute's starts only t+63's counts (t+4 is 60 s
    # old), so 9 more may start now, and the next when t+63's is a minute old
    await ledger.keys.update_key(ident, rec(ident, rpm=10))
    for n in range(9):
        await reserve(ledger, ident, f"s{n}", start + 64)
    refused = await _refusal(ledger, ident, "x2", start + 64)
    assert refused.headers["retry-after-ms"] == str((63 + WINDOW_S - 64) * 1000)


@pytest.mark.parametrize("seed", range(4))
async def test_the_limit_admits_exactly_what_a_sliding_log_admits(
    ledger: Ledgers, clock: Clock, seed: int
) -> None:
    """Against a plain model: a start is admitted when fewer than rpm admitted starts lie in
    the 60 s before it. Random arrivals, bursts and quiet spells, and limit changes."""
    rng = random.Random(seed)
    await account(ledger, "acct_A", purchased=10**12)
    rpm = rng.randint(1, 12)
    ident = await key(ledger, "acct_A", "k1", rpm=rpm)
    admitted: list[int] = []  # ms
    now_ms = int(clock() * 1000)
    for n in range(400):
        now_ms += rng.choice([0, 1, 50, 900, 3_000, 7_000, 20_000, 61_000])
        if rng.random() < 0.03:
            rpm = rng.randint(1, 12)
            await ledger.keys.update_key(ident, rec(ident, rpm=rpm))
        recent = [t for t in admitted if t > now_ms - WINDOW_S * 1000]
        expected = len(recent) < rpm
        if not expected:
            with pytest.raises(ApiError) as info:
                await reserve(ledger, ident, f"r{n}", now_ms / 1000, max_out=1)
            refused = info.value
            assert refused.kind is ErrorKind.KEY_RATE_LIMITED
            oldest = sorted(recent)[-rpm]
            assert refused.headers["retry-after-ms"] == str(oldest + WINDOW_S * 1000 - now_ms)
            continue
        await reserve(ledger, ident, f"r{n}", now_ms / 1000, max_out=1)
        admitted.append(now_ms)


# -- allowed models --------------------------------------------------------------------------


async def test_a_key_uses_only_the_models_it_allows(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=10_000)
    ident = await key(ledger, "acct_A", "k1", models="svc-fast svc-code")
    await reserve(ledger, ident, "r1", clock(), models="svc-fast")
    await reserve(ledger, ident, "r2", clock(), models="svc-code")
    before = await snapshot(ledger)
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r3", clock(), models="svc-smart")
    assert (info.value.kind, info.value.status, info.value.param) == (
        ErrorKind.MODEL_NOT_ALLOWED,
        403,
        "model",
    )
    # svc-auto needs every alias it may route to
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r4", clock(), models="svc-code svc-fast svc-smart")
    assert info.value.kind is ErrorKind.MODEL_NOT_ALLOWED
    assert await snapshot(ledger) == before
    # a name that merely contains an allowed one is not allowed
    with pytest.raises(ApiError):
        await reserve(ledger, ident, "r5", clock(), models="svc")


async def test_an_empty_list_allows_no_model_and_none_allows_all(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=10_000)
    none = await key(ledger, "acct_A", "k1", models="")
    every = await key(ledger, "acct_A", "k2")
    with pytest.raises(ApiError) as info:
        await reserve(ledger, none, "r1", clock())
    assert info.value.kind is ErrorKind.MODEL_NOT_ALLOWED
    await reserve(ledger, every, "r2", clock(), models="svc-code svc-fast svc-smart")
    # and a PATCH lifts the list at once
    await ledger.keys.update_key(none, rec(none, models=None))
    await reserve(ledger, none, "r3", clock())


async def test_a_rotation_lineage_shares_one_rate_limit_and_one_cap(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=10_000)
    old = await key(ledger, "acct_A", "k1", rpm=2, cap=15)
    new = await key(ledger, "acct_A", "k2", rpm=2, cap=15, lineage="k1")
    first = await reserve(ledger, old, "r1", clock(), max_out=5)
    second = await reserve(ledger, new, "r2", clock(), max_out=5)
    assert first.cap_key == second.cap_key
    refused = await _refusal(ledger, new, "r3", clock())
    assert refused.kind is ErrorKind.KEY_RATE_LIMITED
    # the cap: 10 of 15 held by the two keys together
    await ledger.keys.update_key(new, rec(new, rpm=None, cap=15))
    await ledger.keys.update_key(old, rec(old, rpm=None, cap=15))
    hold = await reserve(ledger, new, "r4", clock(), max_out=5)
    assert hold.amount == 5


async def test_a_request_that_holds_nothing_starts_in_the_completions_rate_log(
    ledger: Ledgers, clock: Clock
) -> None:
    """rate_start.lua (token counts) and reserve.lua keep one rate log per key lineage."""
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1", rpm=2)
    assert await ledger.keys.start_request(ident, clock()) == 0
    await reserve(ledger, ident, "r1", clock(), max_out=1)
    wait_ms = await ledger.keys.start_request(ident, clock())
    assert 0 < wait_ms <= 60_000
    refused = await reserved(ledger, ident, "r2", clock(), max_out=1)
    assert isinstance(refused, Refusal)
    assert refused.status is ScriptStatus.RATE_LIMITED
    clock.advance(60)
    assert await ledger.keys.start_request(ident, clock()) == 0
    # a key without a limit logs nothing
    free = await key(ledger, "acct_A", "k2")
    assert await ledger.keys.start_request(free, clock()) == 0
    assert await ledger.redis.exists(ledger.layout.rate(free.shard, "k2")) == 0
