"""What a store's event asks of svc's purchases, whatever the store: each store's reader
(``stripe_events``; the App Store's and Google Play's) turns what it verified into one
``PaymentEvent``, and ``purchases.Purchases`` applies it to the ledger."""

from __future__ import annotations

from typing import Literal

import msgspec

EventKind = Literal[
    "paid", "pending", "failed", "refunded", "dispute_opened", "dispute_won", "dispute_lost",
    "ignored", "refund_reversed", "consumption_request",
]  # fmt: skip
"""``refund_reversed``: the store reversed its refunds of the payment (the App Store's
REFUND_REVERSED), so what they took is given back; ``consumption_request``: the store asks
how much of the purchase was used before it decides a refund (changes nothing here)."""


class PaymentEvent(msgspec.Struct, frozen=True, kw_only=True):
    """What one store event asks of svc's purchases. Fields an event's kind does not
    carry are None; the names are Stripe's, which came first (a store's transaction is its
    ``session_id``, the payment its refunds name is its ``payment_intent``)."""

    kind: EventKind
    event_id: str
    event_type: str
    session_id: str | None = None
    """The Checkout Session (a purchase is one session)."""
    payment_intent: str | None = None
    """The payment: how refunds and disputes find their purchase."""
    client_reference_id: str | None = None
    """The account the session was created for: ``acct_…`` or the account's external id."""
    account_pid: str | None = None
    """The account, when the store's reader resolved it itself (an app account token's):
    used instead of ``client_reference_id``."""
    credits: int | None = None
    """``metadata.svc_credits`` as a positive integer; None when absent or not one (the
    caller keeps such a purchase as unmatched)."""
    amount_total: int | None = None
    """The session's total, in the currency's minor units."""
    currency: str | None = None
    amount: int | None = None
    """A refunded charge's amount (minor units)."""
    amount_refunded: int | None = None
    """How much of the charge is refunded so far, all refunds together (Stripe's cumulative
    ``amount_refunded``)."""
    dispute_id: str | None = None
    dispute_status: str | None = None
    """Stripe's status of the dispute (``won``, ``lost``, ``warning_closed``, …)."""
