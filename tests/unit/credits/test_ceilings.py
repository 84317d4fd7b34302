"""A request's credit ceiling inside the reserve script (``svc-max-credits``, a key's
``max_credits_per_request``): the hold never exceeds it, the output cap is lowered to fit,
a prompt it cannot hold is refused with nothing changed, and settle never charges more, on
fakeredis, Valkey and the Cluster, one request at a time and 300 at once."""

from __future__ import annotations

import asyncio
import random

import pytest

from app.core.errors import ApiError, ErrorKind
from app.credits.ceilings import HEADER
from app.credits.outcomes import Identity, Rates, Refusal, ScriptStatus, Tokens
from app.keys.refusals import refusal_error
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, pools, rec, reserve, reserved, snapshot

# 1 credit per prompt token's 1,000 units: a prompt of 5,000 units may cost 5 credits
PROMPT_UNITS = 5_000
OUTPUT_PRICE = 1_000  # one credit per output token


async def _ceiling_refusal(
    ledger: Ledgers, ident: Identity, now: float, **options: object
) -> Refusal:
    before = await snapshot(ledger)
    refused = await reserved(ledger, ident, "refused", now, **options)  # type: ignore[arg-type]
    assert isinstance(refused, Refusal)
    assert refused.status is ScriptStatus.CEILING_TOO_LOW
    assert await snapshot(ledger) == before  # nothing held, counted or logged
    return refused


async def test_a_ceiling_lowers_the_output_cap_to_fit(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=10_000)
    ident = await key(ledger, "acct_A", "k1")
    # 5 credits of prompt + 100 output tokens would hold 105; the ceiling holds 20: 15 tokens
    hold = await reserve(
        ledger,
        ident,
        "r1",
        clock(),
        prompt_units=PROMPT_UNITS,
        max_out=100,
        min_out=16,
        ceiling=20,
    )
    assert (hold.amount, hold.out_tokens) == (20, 15)
    # a client's own max_tokens is lowered too: the ceiling is the client's word as well
    chosen = await reserve(
        ledger, ident, "r2", clock(), prompt_units=PROMPT_UNITS, max_out=100, ceiling=20
    )
    assert (chosen.amount, chosen.out_tokens) == (20, 15)
    # a ceiling above the request's worst case changes nothing
    roomy = await reserve(
        ledger, ident, "r3", clock(), prompt_units=PROMPT_UNITS, max_out=100, ceiling=500
    )
    assert (roomy.amount, roomy.out_tokens) == (105, 100)
    assert await pools(ledger, "acct_A") == (0, 10_000 - 20 - 20 - 105)


async def test_an_uneven_prompt_still_fits_under_the_ceiling(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=10_000)
    ident = await key(ledger, "acct_A", "k1")
    # 4,321 units of prompt at 150 per 1,000 output tokens under a ceiling of 7:
    # floor((7,000 - 4,321) / 150) = 17 tokens, ceil((4,321 + 17 x 150) / 1000) = 7
    hold = await reserve(
        ledger,
        ident,
        "r1",
        clock(),
        prompt_units=4_321,
        output_price=150,
        max_out=400,
        ceiling=7,
    )
    assert (hold.amount, hold.out_tokens) == (7, 17)


async def test_a_prompt_the_ceiling_cannot_hold_is_refused_unchanged(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=10_000)
    ident = await key(ledger, "acct_A", "k1", cap=1_000, rpm=5)
    refused = await _ceiling_refusal(
        ledger, ident, clock(), prompt_units=PROMPT_UNITS, max_out=100, ceiling=4
    )
    assert (refused.ceiling, refused.value) == (4, 5)
    error = refusal_error(refused)
    assert (error.status, error.kind) == (402, ErrorKind.CREDIT_CEILING_TOO_LOW)
    assert error.kind.code == "credit_ceiling_too_low"
    assert "ceiling is 4 credits" in error.message
    assert "prompt alone may cost up to 5" in error.message
    assert HEADER in error.message
    assert "max_credits_per_request" in error.message
    # the prompt fits (5) but not one output token beside it (6): refused as well
    no_room = await _ceiling_refusal(
        ledger, ident, clock(), prompt_units=PROMPT_UNITS, max_out=100, ceiling=5
    )
    assert (no_room.ceiling, no_room.value) == (5, 5)
    assert "no room for output" in refusal_error(no_room).message


async def test_a_keys_ceiling_holds_alone_and_the_lower_of_two_wins(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=10_000)
    ident = await key(ledger, "acct_A", "k1", ceiling=30)
    alone = await reserve(ledger, ident, "r1", clock(), prompt_units=PROMPT_UNITS, max_out=100)
    assert (alone.amount, alone.out_tokens) == (30, 25)
    lower_header = await reserve(
        ledger, ident, "r2", clock(), prompt_units=PROMPT_UNITS, max_out=100, ceiling=12
    )
    assert (lower_header.amount, lower_header.out_tokens) == (12, 7)
    # a header cannot lift the key's ceiling
    higher_header = await reserve(
        ledger, ident, "r3", clock(), prompt_units=PROMPT_UNITS, max_out=100, ceiling=90
    )
    assert (higher_header.amount, higher_header.out_tokens) == (30, 25)
    # the key's is named when it is the one that refuses
    await ledger.keys.update_key(ident, rec(ident, ceiling=3))
    refused = await _ceiling_refusal(
        ledger, ident, clock(), prompt_units=PROMPT_UNITS, max_out=100, ceiling=90
    )
    assert refused.ceiling == 3
    # and an update that removes it lets the request hold its whole worst case
    await ledger.keys.update_key(ident, rec(ident, ceiling=None))
    free = await reserve(ledger, ident, "r4", clock(), prompt_units=PROMPT_UNITS, max_out=100)
    assert (free.amount, free.out_tokens) == (105, 100)


async def test_a_ceiling_counts_before_the_balance_and_the_cap(
    ledger: Ledgers, clock: Clock
) -> None:
    """A ceiling the request cannot meet is refused as that, whatever else would refuse it;
    one it meets leaves the balance and the daily cap to lower the output cap further."""
    await account(ledger, "acct_A", purchased=12)
    ident = await key(ledger, "acct_A", "k1")
    refused = await _ceiling_refusal(
        ledger, ident, clock(), prompt_units=PROMPT_UNITS, max_out=100, ceiling=2
    )
    assert refused.ceiling == 2
    hold = await reserve(
        ledger,
        ident,
        "r1",
        clock(),
        prompt_units=PROMPT_UNITS,
        max_out=100,
        min_out=1,
        ceiling=40,
    )
    assert (hold.amount, hold.out_tokens) == (12, 7)  # the balance, lower than the ceiling
    with pytest.raises(ApiError) as info:
        await reserve(
            ledger, ident, "r2", clock(), prompt_units=PROMPT_UNITS, max_out=100, ceiling=40
        )
    assert info.value.kind is ErrorKind.INSUFFICIENT_CREDITS


async def test_a_test_key_is_held_to_its_ceiling_too(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A")
    ident = await key(ledger, "acct_A", "k1", environment="test", ceiling=9)
    hold = await reserve(ledger, ident, "r1", clock(), prompt_units=PROMPT_UNITS, max_out=100)
    assert (hold.amount, hold.out_tokens) == (9, 4)


async def test_300_requests_at_once_never_cost_more_than_their_ceilings(
    ledger: Ledgers, clock: Clock
) -> None:
    """300 reserves and settles at once, half with a header ceiling and all under the key's,
    each settled with usage far above what it held (a hostile or broken upstream): no charge
    exceeds its ceiling, and the pools lost exactly what was charged."""
    start = 1_000_000
    await account(ledger, "acct_A", purchased=start)
    ident = await key(ledger, "acct_A", "k1", ceiling=25)
    rng = random.Random(35)
    ceilings = [rng.choice([0, 7, 13, 25, 60]) for _ in range(300)]
    rates = Rates(input=1_000, cached_input=250, cache_write=1_000, output=OUTPUT_PRICE)

    connections = asyncio.Semaphore(40)  # the test pool's size; Redis sees them interleaved

    async def one(n: int, ceiling: int) -> tuple[int, int]:
        async with connections:
            return await reserve_and_settle(n, ceiling)

    async def reserve_and_settle(n: int, ceiling: int) -> tuple[int, int]:
        hold = await reserve(
            ledger,
            ident,
            f"r{n}",
            clock(),
            prompt_units=PROMPT_UNITS,
            max_out=200,
            min_out=1,
            ceiling=ceiling,
        )
        # reported: far more than the hold covers, as a hostile upstream may claim
        done = await ledger.holds.settle(
            hold,
            now=clock(),
            rates=rates,
            tokens=Tokens(prompt=5 + n, completion=10_000 + n),
            outcome="completed",
        )
        return hold.amount, done.credits_used

    results = await asyncio.gather(*(one(n, c) for n, c in enumerate(ceilings)))
    for (held, used), ceiling in zip(results, ceilings, strict=True):
        limit = min(25, ceiling) if ceiling else 25
        assert held <= limit
        assert used <= held
    charged = sum(used for _, used in results)
    assert charged > 0
    assert await pools(ledger, "acct_A") == (0, start - charged)
