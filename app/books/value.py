"""What a credit is worth in the books: ``SVC_CREDIT_VALUE`` (an amount of a currency per
1,000 credits), or, when it is unset, each currency's net revenue of the period per credit
sold in it. A value is a fraction held exactly (``micros`` per ``credits``); credits are
valued once, rounded down to a micro-unit (docs/operations.md, "The books")."""

from __future__ import annotations

import re
from decimal import Decimal

import msgspec

from app.completion.costs import DEFAULT_CURRENCY, MICRO
from app.core.settings import CREDIT_VALUE_FORM

PER_CREDITS = 1_000
SETTING = "setting"
REVENUE = "revenue"


class CreditValue(msgspec.Struct, frozen=True, kw_only=True):
    """``micros`` micro-units of ``currency`` for every ``credits`` credits."""

    currency: str
    micros: int
    credits: int
    source: str  # SETTING | REVENUE (the period's net revenue per credit sold)

    def of(self, credits: int) -> int:
        """What ``credits`` are worth, in micro-units rounded down."""
        return credits * self.micros // self.credits


def setting_value(raw: str) -> CreditValue:
    """``SVC_CREDIT_VALUE`` as a value (the setting's pattern has checked its form)."""
    match = re.fullmatch(CREDIT_VALUE_FORM, raw.strip())
    if match is None:
        raise ValueError(f"SVC_CREDIT_VALUE: not an amount and a currency: {raw[:40]!r}")
    return CreditValue(
        currency=match["currency"] or DEFAULT_CURRENCY,
        micros=int(Decimal(match["amount"]) * MICRO),
        credits=PER_CREDITS,
        source=SETTING,
    )


def configured_value(setting: str | None) -> CreditValue | None:
    """The value ``SVC_CREDIT_VALUE`` (``setting``) gives a credit, None while it is unset
    (each currency's revenue per credit sold values them then)."""
    return None if setting is None else setting_value(setting)


def revenue_values(net: dict[str, int], sold: dict[str, int]) -> dict[str, CreditValue]:
    """Per currency, its net revenue (micro-units) per credit sold in it; none for a
    currency that sold no credit."""
    return {
        currency: CreditValue(
            currency=currency, micros=net.get(currency, 0), credits=credits, source=REVENUE
        )
        for currency, credits in sold.items()
        if credits > 0 and currency
    }
