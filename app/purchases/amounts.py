"""What the stores' amounts are in micro-units of their currency (a millionth of a unit), the
one unit the books count money in (``app.books``).

Stripe reports amounts in the currency's smallest unit: cents for most currencies, whole
units for zero-decimal ones (JPY, KRW, …), thousandths for three-decimal ones (KWD, …), as
its currencies page lists them. The App Store reports a transaction's ``price`` in
milliunits of its currency, whatever the currency. Google Play's purchase (what svc reads
of it) has no amount.
"""

from __future__ import annotations

from app.purchases.apple_wire import APPLE

ZERO_DECIMAL = frozenset(
    [
        "BIF",
        "CLP",
        "DJF",
        "GNF",
        "JPY",
        "KMF",
        "KRW",
        "MGA",
        "PYG",
        "RWF",
        "UGX",
        "VND",
        "VUV",
        "XAF",
        "XOF",
        "XPF",
    ]
)
THREE_DECIMAL = frozenset(["BHD", "JOD", "KWD", "OMR", "TND"])
MICROS_PER_UNIT = 1_000_000
_MICROS_PER_MINOR_UNIT = {0: MICROS_PER_UNIT, 2: MICROS_PER_UNIT // 100, 3: MICROS_PER_UNIT // 1000}


def minor_unit_digits(currency: str) -> int:
    """How many decimals Stripe's amounts of ``currency`` have."""
    code = currency.upper()
    if code in ZERO_DECIMAL:
        return 0
    if code in THREE_DECIMAL:
        return 3
    return 2


def store_micros(source: str, currency: str, amount: int) -> int:
    """``amount`` of ``currency`` as the store ``source`` reported it, in micro-units: exact
    (every store's unit is a whole number of micro-units)."""
    if source == APPLE:
        return amount * (MICROS_PER_UNIT // 1000)
    return amount * _MICROS_PER_MINOR_UNIT[minor_unit_digits(currency)]
