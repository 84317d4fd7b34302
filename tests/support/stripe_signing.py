"""Stripe webhook events as Stripe sends them, made in the test: the ``Stripe-Signature`` a
secret makes (computed here with hashlib, not with Stripe's library, so the verifier is
checked against an independent signer) and the bodies of the events svc reads, shaped as
Stripe's documented examples (fields svc does not read included, as Stripe sends them).

Every builder returns the raw body (bytes): what is signed is exactly what is sent.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from itertools import count
from typing import Any

API_VERSION = "2025-06-30.basil"
CREATED = 1_790_000_000
_serial = count(1)


def sign(payload: bytes, secret: str, timestamp: int) -> str:
    """The ``Stripe-Signature`` header Stripe sends with ``payload``:
    ``t=<unix>,v1=<hex HMAC-SHA256(secret, f"{t}.{payload}")>``."""
    signed = str(timestamp).encode() + b"." + payload
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def _next_id(prefix: str) -> str:
    return f"{prefix}_test{next(_serial):010d}"


def _event(event_type: str, obj: dict[str, Any], event_id: str | None) -> bytes:
    event = {
        "id": event_id or _next_id("evt"),
        "object": "event",
        "api_version": API_VERSION,
        "created": CREATED,
        "data": {"object": obj},
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": None},
        "type": event_type,
    }
    return json.dumps(event).encode()


def checkout_session(
    event_type: str = "checkout.session.completed",
    *,
    session_id: str = "cs_test_a1",
    account: str | None = "acct_test",
    credits: str | None = "1000",
    payment_status: str = "paid",
    payment_intent: str | None = "pi_test_1",
    amount_total: int = 1000,
    currency: str = "usd",
    event_id: str | None = None,
) -> bytes:
    """A ``checkout.session.*`` event (``completed``, ``async_payment_succeeded``,
    ``async_payment_failed``) of a session in payment mode; ``credits`` is the metadata's
    ``svc_credits`` as the reseller's backend set it (a string, as all Stripe metadata is;
    None leaves it out)."""
    session = {
        "id": session_id,
        "object": "checkout.session",
        "amount_subtotal": amount_total,
        "amount_total": amount_total,
        "automatic_tax": {"enabled": False, "liability": None, "status": None},
        "cancel_url": "https://shop.example/cancel",
        "client_reference_id": account,
        "created": CREATED - 60,
        "currency": currency,
        "customer": None,
        "customer_details": {"email": "buyer@example.com", "name": None, "tax_exempt": "none"},
        "livemode": False,
        "metadata": {} if credits is None else {"svc_credits": credits},
        "mode": "payment",
        "payment_intent": payment_intent,
        "payment_method_types": ["card"],
        "payment_status": payment_status,
        "status": "complete",
        "success_url": "https://shop.example/thanks",
        "total_details": {"amount_discount": 0, "amount_shipping": 0, "amount_tax": 0},
        "url": None,
    }
    return _event(event_type, session, event_id)


def charge_refunded(
    *,
    payment_intent: str | None = "pi_test_1",
    amount: int = 1000,
    amount_refunded: int = 1000,
    currency: str = "usd",
    event_id: str | None = None,
) -> bytes:
    """A ``charge.refunded`` event: ``amount_refunded`` is the charge's cumulative refunded
    amount, as Stripe reports it after each refund."""
    charge = {
        "id": "ch_test_1",
        "object": "charge",
        "amount": amount,
        "amount_captured": amount,
        "amount_refunded": amount_refunded,
        "balance_transaction": "txn_test_1",
        "captured": True,
        "created": CREATED - 60,
        "currency": currency,
        "customer": None,
        "disputed": False,
        "livemode": False,
        "metadata": {},
        "paid": True,
        "payment_intent": payment_intent,
        "payment_method": "pm_test_1",
        "refunded": amount_refunded >= amount,
        "status": "succeeded",
    }
    return _event("charge.refunded", charge, event_id)


def dispute(
    event_type: str = "charge.dispute.created",
    *,
    dispute_id: str = "du_test_1",
    payment_intent: str | None = "pi_test_1",
    status: str = "needs_response",
    amount: int = 1000,
    currency: str = "usd",
    event_id: str | None = None,
) -> bytes:
    """A ``charge.dispute.created`` or ``charge.dispute.closed`` event (``status``: Stripe's
    dispute status, ``won`` or ``lost`` once closed)."""
    obj = {
        "id": dispute_id,
        "object": "dispute",
        "amount": amount,
        "balance_transactions": [],
        "charge": "ch_test_1",
        "created": CREATED - 30,
        "currency": currency,
        "evidence_details": {"due_by": CREATED + 7 * 86_400, "has_evidence": False},
        "is_charge_refundable": False,
        "livemode": False,
        "metadata": {},
        "payment_intent": payment_intent,
        "reason": "fraudulent",
        "status": status,
    }
    return _event(event_type, obj, event_id)
