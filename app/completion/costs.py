"""What a provider charges svc for a request: the costs the models file names on an alias's
upstream (its provider's currency per million tokens), held as integers, and a request's
cost worked out from them in whole micro-units of that currency (docs/operations.md, "The
books").

A price of the models file becomes micro-units per million tokens (0.4 -> 400,000): exact
for any price with at most six decimals (a finer one stops start-up). A request's cost is
``ceil((uncached x input + cached x cached_input + writes x cache_write + completion x
output) / 1,000,000)`` micro-units: integers only, rounded up once per request.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

import msgspec

from app.credits.outcomes import Tokens

MICRO = 1_000_000
"""Micro-units in a unit of a currency, and tokens in the million a price is for."""
DECIMALS = 6
"""The most decimals a price of the models file may have (a micro-unit per million tokens)."""
CURRENCY = re.compile(r"[A-Z]{3}\Z")
"""An ISO 4217 code, as ``cost_currency`` must be written."""
DEFAULT_CURRENCY = "USD"


class CostEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``cost`` of an upstream in the models file: the provider's price per million tokens
    of uncached input, cached input (default: the input price), input written to its cache
    (default: the input price) and output, in its provider's ``cost_currency``."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None


class UpstreamCost(msgspec.Struct, frozen=True):
    """An upstream's prices in micro-units of ``currency`` per million tokens."""

    currency: str
    input: int
    cached_input: int
    cache_write: int
    output: int


def micros_per_million(value: float) -> int:
    """A price of the models file (currency per million tokens) in micro-units per million
    tokens; ``ValueError`` (its message a sentence) when it is negative, not finite, or
    finer than a micro-unit."""
    if not math.isfinite(value) or value < 0:
        raise ValueError("must be a number from 0 up")
    try:
        # repr: the shortest text that reads back as this float, i.e. what was written
        exact = Decimal(repr(value)).scaleb(DECIMALS)
    except InvalidOperation:  # pragma: no cover - a finite float always converts
        raise ValueError("must be a number from 0 up") from None
    if exact != exact.to_integral_value():
        raise ValueError(f"has more than {DECIMALS} decimals")
    return int(exact)


def upstream_cost(entry: CostEntry, currency: str) -> UpstreamCost:
    """``entry`` as integers; ``ValueError`` naming the price that cannot be one."""
    prices = {}
    for name in ("input", "cached_input", "cache_write", "output"):
        value = getattr(entry, name)
        if value is None:
            continue
        try:
            prices[name] = micros_per_million(value)
        except ValueError as exc:
            raise ValueError(f"{name}: {value!r} {exc}") from None
    return UpstreamCost(
        currency=currency,
        input=prices["input"],
        cached_input=prices.get("cached_input", prices["input"]),
        cache_write=prices.get("cache_write", prices["input"]),
        output=prices["output"],
    )


def cost_micros(cost: UpstreamCost, tokens: Tokens) -> int:
    """What ``tokens`` cost at ``cost``, in micro-units rounded up (their parts as billed:
    cached and cache writes within the prompt, as ``app.completion.settlement`` clamps them)."""
    uncached = tokens.prompt - tokens.cached - tokens.cache_writes
    units = (
        uncached * cost.input
        + tokens.cached * cost.cached_input
        + tokens.cache_writes * cost.cache_write
        + tokens.completion * cost.output
    )
    return -(-units // MICRO)
