"""A plain Python model of what settle.lua charges (the formula of docs/api.md, "Pricing"),
for the tests to hold the script to; svc itself has it in settle.lua only."""

from __future__ import annotations

import math

from app.completion.catalog import Price
from app.credits.outcomes import NO_RATES, Rates, Tokens


def charge(price: Price | Rates, tokens: Tokens) -> int:
    """Credits a settled (not released or swept) request costs, before the hold caps it."""
    rates = price.rates if isinstance(price, Price) else price
    cached = min(max(tokens.cached, 0), tokens.prompt)
    writes = min(max(tokens.cache_writes, 0), tokens.prompt - cached)
    uncached = tokens.prompt - cached - writes
    units = (
        uncached * rates.input
        + cached * rates.cached_input
        + writes * rates.cache_write
        + tokens.completion * rates.output
    )
    return max(1, math.ceil(units / 1000))


def rates_for(credits: int, prompt: int, completion: int) -> Rates:
    """Rates at which ``prompt`` and ``completion`` tokens cost exactly ``credits`` (for the
    tests written against a charge, before settle worked it out); 0 credits: none at all
    (only released and swept settle for nothing)."""
    if credits == 0:
        return NO_RATES
    for tokens, as_output in ((completion, True), (prompt, False)):
        if 0 < tokens <= 1000:
            per = credits * 1000 // tokens
            rates = Rates(0, 0, 0, per) if as_output else Rates(per, per, per, 0)
            assert charge(rates, Tokens(prompt, completion)) == credits
            return rates
    assert credits == 1, (credits, prompt, completion)
    return NO_RATES
