"""How many of a purchase's credits a refund takes back: the one rule, for every store.

A store reports refunds as a cumulative amount (Stripe's ``charge.refunded`` carries the
charge's ``amount_refunded`` so far), so the credits a refund takes are the share of the
credits that amount stands for, rounded down in the buyer's favour, less what earlier
refunds of the purchase took already. Taking back by cumulative share, never by each
refund's own amount, makes a repeated or late event take nothing more, and any order of
partial refunds end at the same total: ``floor(credits × largest refunded / amount)``.
"""

from __future__ import annotations


def credits_to_take(credits: int, amount: int, amount_refunded: int, already_taken: int) -> int:
    """The credits to take back now from a purchase of ``credits`` paid with ``amount``
    (minor units), ``amount_refunded`` of which is refunded so far, when ``already_taken``
    credits were taken back for it before: ``max(0, floor(credits × refunded / amount) −
    already_taken)``, ``refunded`` being ``amount_refunded`` at most ``amount`` (a full
    refund takes every credit). Integers only: no float rounds a large purchase wrong."""
    if credits < 0 or amount <= 0 or amount_refunded < 0 or already_taken < 0:
        raise ValueError(
            "credits_to_take: credits, amount_refunded and already_taken must be >= 0, "
            "and amount > 0"
        )
    refunded = min(amount_refunded, amount)
    return max(0, credits * refunded // amount - already_taken)


def amount_refunded(amount: int, charged: int, refunded: int) -> int:
    """The part of a purchase's ``amount`` a store's cumulative refund of ``refunded`` out
    of ``charged`` is: ``floor(amount × min(refunded, charged) / charged)``; exactly
    ``refunded`` when the store charged the purchase's amount (Stripe's charge), the share
    of it a store reports as a share (the App Store's prorated refund, of ``WHOLE``)."""
    if amount < 0 or charged <= 0 or refunded < 0:
        raise ValueError("amount_refunded: amount and refunded must be >= 0, charged > 0")
    return amount * min(refunded, charged) // charged
