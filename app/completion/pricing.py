"""``GET /v1/pricing``: each enabled alias's prices as settle.lua charges them (docs/api.md,
"Pricing"). The console's Pricing page renders this answer."""

from __future__ import annotations

import msgspec

from app.completion.catalog import AUTO, AUTO_ROUTES, Alias

UNIT = "credits per 1,000 tokens"
FORMULA = (
    "max(1, ceil((uncached_prompt_tokens * input + cached_tokens * cached_input"
    " + cache_write_tokens * cache_write + completion_tokens * output) / 1000))"
)
ROUNDING = (
    "Each request is charged once, when it ends: the sum over its tokens of tokens times "
    "price, divided by 1,000 and rounded up to a whole credit, and at least 1 credit. "
    "uncached_prompt_tokens = prompt_tokens - cached_tokens - cache_write_tokens; "
    "completion_tokens include reasoning tokens. A request released before any output "
    "costs nothing."
)


class PriceItem(msgspec.Struct, kw_only=True):
    """One alias's prices, in ``UNIT``. svc-auto has none of its own: each request is
    priced as the alias it routes to (``routes_to``)."""

    model: str
    input: int | None
    cached_input: int | None
    cache_write: int | None
    output: int | None
    max_output_tokens: int
    routes_to: list[str] | None = None


class PriceList(msgspec.Struct, kw_only=True):
    object: str
    unit: str
    formula: str
    rounding: str
    data: list[PriceItem]


def price_list(aliases: dict[str, Alias], usable: set[str]) -> PriceList:
    """The enabled aliases among ``usable`` (those the key may use, as ``GET /v1/models``
    lists them), in the catalogue's order."""
    items = []
    for alias in aliases.values():
        if not alias.enabled or alias.id not in usable:
            continue
        if alias.id == AUTO:
            routes = [r for r in AUTO_ROUTES if r in usable and aliases[r].enabled]
            items.append(
                PriceItem(
                    model=alias.id,
                    input=None,
                    cached_input=None,
                    cache_write=None,
                    output=None,
                    max_output_tokens=max(
                        (aliases[r].max_output_tokens for r in routes), default=0
                    ),
                    routes_to=routes,
                )
            )
            continue
        p = alias.price
        items.append(
            PriceItem(
                model=alias.id,
                input=p.input,
                cached_input=p.cached_input,
                cache_write=p.cache_write,
                output=p.output,
                max_output_tokens=alias.max_output_tokens,
            )
        )
    return PriceList(object="list", unit=UNIT, formula=FORMULA, rounding=ROUNDING, data=items)
