"""settle.lua prices cached prompt tokens, cache writes and output (docs/api.md, "Pricing"),
on fakeredis, Valkey and a Valkey Cluster (the ``ledger`` fixture), held to the plain model
in tests.support.pricing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.completion.catalog import price
from app.credits.outcomes import Rates, ScriptStatus, Tokens
from app.kv.stream_events import UsageEvent, parse_event
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.pricing import charge
from tests.support.scripts_helpers import account, key, reserve

CODE = price(20, 60)  # cached input 5 (a quarter), cache write 20 (the input price)
WRITES_DEARER = price(20, 60, cache_write=25)
_rids = iter(range(10**9))


async def _settle(ledger: Ledgers, clock: Clock, rates: Rates, tokens: Tokens) -> UsageEvent:
    """Settle a hold that covers any charge here; the usage event it wrote."""
    if not await ledger.redis.exists(
        ledger.layout.account(ledger.layout.shard("acct_C"), "acct_C")
    ):
        await account(ledger, "acct_C", purchased=10**12)
    ident = await key(ledger, "acct_C", "kidC00000000")
    rid = f"rC{next(_rids)}"
    hold = await reserve(ledger, ident, rid, clock(), max_out=10**9)
    done = await ledger.holds.settle(
        hold, now=clock(), rates=rates, tokens=tokens, outcome="completed"
    )
    assert done.status is ScriptStatus.OK
    entries = await ledger.redis.xrange(ledger.layout.events(ident.shard))
    events = [parse_event(i, f) for i, f in entries]
    mine = [e for e in events if isinstance(e, UsageEvent) and e.reservation_id == rid]
    assert len(mine) == 1
    assert mine[0].credits == done.credits_used
    return mine[0]


@pytest.mark.parametrize("cached", [0, 1, 250, 500, 999, 1000])
async def test_cached_tokens_priced_at_the_cached_price(
    ledger: Ledgers, clock: Clock, cached: int
) -> None:
    event = await _settle(ledger, clock, CODE.rates, Tokens(1000, 100, cached, 0, 40))
    # (1000 - cached) x 20 + cached x 5 + 100 x 60, per 1,000, rounded up
    assert event.credits == -(-((1000 - cached) * 20 + cached * 5 + 6000) // 1000)
    assert event.credits == charge(CODE, Tokens(1000, 100, cached))
    assert (event.cached_tokens, event.cache_write_tokens, event.reasoning_tokens) == (
        cached,
        0,
        40,
    )


async def test_all_cached_and_none_cached_bound_the_prompt(ledger: Ledgers, clock: Clock) -> None:
    none = await _settle(ledger, clock, CODE.rates, Tokens(4000, 0))
    every = await _settle(ledger, clock, CODE.rates, Tokens(4000, 0, 4000))
    assert (none.credits, every.credits) == (80, 20)  # 4,000 x 20 / 1,000; 4,000 x 5 / 1,000


async def test_cache_writes_priced_apart(ledger: Ledgers, clock: Clock) -> None:
    event = await _settle(ledger, clock, WRITES_DEARER.rates, Tokens(1000, 10, 200, 300))
    # 500 uncached x 20 + 200 cached x 5 + 300 written x 25 + 10 x 60 = 19,100
    assert event.credits == 20
    assert (event.cached_tokens, event.cache_write_tokens) == (200, 300)


async def test_hostile_parts_clamped_to_their_whole(ledger: Ledgers, clock: Clock) -> None:
    # more cached than prompt: all of the prompt cached; writes beyond the uncached rest:
    # the rest; reasoning beyond the completion: the completion
    event = await _settle(ledger, clock, WRITES_DEARER.rates, Tokens(1000, 10, 10**9, 10**9, 10**9))
    assert event.credits == -(-(1000 * 5 + 10 * 60) // 1000)
    assert (event.cached_tokens, event.cache_write_tokens, event.reasoning_tokens) == (
        1000,
        0,
        10,
    )
    event = await _settle(ledger, clock, WRITES_DEARER.rates, Tokens(1000, 0, 600, 10**6))
    assert event.credits == -(-(600 * 5 + 400 * 25) // 1000)
    assert event.cache_write_tokens == 400


async def test_the_charge_never_exceeds_the_hold(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_H", purchased=1000)
    ident = await key(ledger, "acct_H", "kidH00000000")
    hold = await reserve(ledger, ident, "rH", clock(), max_out=7)
    done = await ledger.holds.settle(
        hold,
        now=clock(),
        rates=WRITES_DEARER.rates,
        tokens=Tokens(10**6, 10**6),
        outcome="completed",
    )
    assert done.credits_used == hold.amount == 7


@pytest.mark.parametrize(
    ("tokens", "credits"),
    [
        (Tokens(0, 0), 1),  # at least 1
        (Tokens(100, 0), 1),
        (Tokens(1000, 1000), 20),
        (Tokens(1, 66), 1),  # 5 + 990 = 995 -> 1
        (Tokens(1, 67), 2),  # 5 + 1005 -> 2
        (Tokens(1000, 0, 1000), 2),  # all cached: 1,000 x 2 -> 2
        (Tokens(1001, 0, 1000), 3),  # 2,000 + 5 -> 3
    ],
)
async def test_rounded_up_with_a_minimum_of_one(
    ledger: Ledgers, clock: Clock, tokens: Tokens, credits: int
) -> None:
    fast = price(5, 15)
    assert (await _settle(ledger, clock, fast.rates, tokens)).credits == credits


counts = st.integers(0, 2_000_000)
prices = st.integers(0, 1_000)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rates=st.tuples(prices, prices, prices, prices).map(lambda r: Rates(*r)),
    tokens=st.tuples(counts, counts, counts, counts, counts).map(lambda t: Tokens(*t)),
)
async def test_charge_matches_the_formula(
    ledger: Ledgers, clock: Clock, rates: Rates, tokens: Tokens
) -> None:
    event = await _settle(ledger, clock, rates, tokens)
    assert event.credits == charge(rates, tokens)
