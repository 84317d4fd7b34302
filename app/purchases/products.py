"""A store's products as the operator names them (``SVC_APPLE_PRODUCTS``, and any store's
``product_id=credits,…``): the credits one purchase of each product grants."""

from __future__ import annotations

from app.core.errors import SettingsError
from app.purchases.purchases import MAX_PURCHASE_CREDITS

_MAX_DIGITS = len(str(MAX_PURCHASE_CREDITS))


def parse_products(variable: str, text: str) -> dict[str, int]:
    """``product_id=credits,…`` as a mapping; a ``SettingsError`` naming ``variable`` and
    the entry at fault for an empty id, a repeated id, or credits that are not a positive
    integer of at most ``MAX_PURCHASE_CREDITS``."""
    products: dict[str, int] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        product, sep, credits = (piece.strip() for piece in part.partition("="))
        if not sep or not product:
            raise SettingsError(f"{variable}: {part.strip()!r} is not product_id=credits")
        if product in products:
            raise SettingsError(f"{variable}: product {product!r} is named twice")
        digits = credits.isascii() and credits.isdigit() and len(credits) <= _MAX_DIGITS
        if not digits or not (0 < int(credits) <= MAX_PURCHASE_CREDITS):
            raise SettingsError(
                f"{variable}: product {product!r} must grant a whole number of credits from 1 "
                f"to {MAX_PURCHASE_CREDITS}, not {credits[:24]!r}"
            )
        products[product] = int(credits)
    return products
