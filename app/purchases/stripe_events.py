"""The Stripe webhook events svc reads, normalized into one ``PaymentEvent``.

The body is decoded once, into the event's envelope (``id``, ``type``, ``data.object``) with
its object as plain JSON values; the object is converted into the struct of its type only for
the types svc reads, so no other event type can be refused for a field svc never looks at (a
refused event is retried by Stripe for days). Unknown fields are ignored everywhere. What
svc does with each kind:

==================  ===============================================  ======================
kind                from                                             what it asks for
==================  ===============================================  ======================
``paid``            ``checkout.session.completed`` with              a purchase, once per
                    ``payment_status: "paid"``;                       session id
                    ``checkout.session.async_payment_succeeded``
``pending``         ``checkout.session.completed``, not paid yet     nothing yet
``failed``          ``checkout.session.async_payment_failed``        nothing
``refunded``        ``charge.refunded``                              take back the share of
                                                                     ``amount_refunded``
``dispute_opened``  ``charge.dispute.created``                       take back the rest
``dispute_won``     ``charge.dispute.closed``, ``status: "won"``     give back what it took
``dispute_lost``    ``charge.dispute.closed``, any other status      nothing more
``ignored``         every other type, and a charge or dispute        nothing
                    without a PaymentIntent (not a Checkout
                    payment, so none of svc's)
==================  ===============================================  ======================

A body that is not JSON, or an event of a type svc reads whose object lacks a field svc reads
(or has one of the wrong type), is a 400 ``invalid_value`` naming the field: nothing can be
written for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from app.core.errors import ApiError, invalid_value
from app.core.validation import convert_fields, decode_json
from app.purchases.events import EventKind, PaymentEvent

CREDITS_FIELD = "svc_credits"
"""The Checkout Session's metadata key that says how many credits it buys."""

StripeId = Annotated[str, msgspec.Meta(min_length=1, max_length=255)]
"""Stripe's ids (``evt_…``, ``cs_…``, ``pi_…``, ``du_…``) are at most 255 characters."""
_T = TypeVar("_T")


class _Data(msgspec.Struct):
    object: dict[str, Any]


class _Event(msgspec.Struct):
    id: StripeId
    type: StripeId
    data: _Data


class _Session(msgspec.Struct):
    id: StripeId
    object: Literal["checkout.session"]
    payment_status: str
    payment_intent: StripeId | None = None
    client_reference_id: str | None = None
    metadata: dict[str, str] = {}
    amount_total: int | None = None
    currency: str | None = None


class _Charge(msgspec.Struct):
    id: StripeId
    object: Literal["charge"]
    amount: Annotated[int, msgspec.Meta(ge=1)]
    amount_refunded: Annotated[int, msgspec.Meta(ge=0)]
    payment_intent: StripeId | None
    currency: str | None = None


class _Dispute(msgspec.Struct):
    id: StripeId
    object: Literal["dispute"]
    status: str
    payment_intent: StripeId | None
    currency: str | None = None


def payment_event(body: bytes) -> PaymentEvent:
    """The raw body of a Stripe webhook event (its signature checked) as a ``PaymentEvent``;
    a 400 when it is not JSON or not shaped as Stripe shapes the events svc reads."""
    event = decode_json(body, _Event)
    read = _READERS.get(event.type)
    if read is None:
        return PaymentEvent(kind="ignored", event_id=event.id, event_type=event.type)
    return read(event)


def _session_event(event: _Event) -> PaymentEvent:
    session = _object(event, _Session)
    kind: EventKind
    if event.type == "checkout.session.async_payment_failed":
        kind = "failed"
    elif event.type == "checkout.session.async_payment_succeeded":
        kind = "paid"
    else:  # completed: paid by card at once, or still pending (a bank debit, a voucher)
        kind = "paid" if session.payment_status == "paid" else "pending"
    return PaymentEvent(
        kind=kind,
        event_id=event.id,
        event_type=event.type,
        session_id=session.id,
        payment_intent=session.payment_intent,
        client_reference_id=session.client_reference_id,
        credits=_credits(session.metadata),
        amount_total=session.amount_total,
        currency=session.currency,
    )


def _refund_event(event: _Event) -> PaymentEvent:
    charge = _object(event, _Charge)
    return PaymentEvent(
        kind="refunded" if charge.payment_intent else "ignored",
        event_id=event.id,
        event_type=event.type,
        payment_intent=charge.payment_intent,
        amount=charge.amount,
        amount_refunded=charge.amount_refunded,
        currency=charge.currency,
    )


def _dispute_event(event: _Event) -> PaymentEvent:
    dispute = _object(event, _Dispute)
    kind: EventKind
    if dispute.payment_intent is None:
        kind = "ignored"
    elif event.type == "charge.dispute.created":
        kind = "dispute_opened"
    else:
        kind = "dispute_won" if dispute.status == "won" else "dispute_lost"
    return PaymentEvent(
        kind=kind,
        event_id=event.id,
        event_type=event.type,
        payment_intent=dispute.payment_intent,
        dispute_id=dispute.id,
        dispute_status=dispute.status,
        currency=dispute.currency,
    )


_READERS: dict[str, Callable[[_Event], PaymentEvent]] = {
    "checkout.session.completed": _session_event,
    "checkout.session.async_payment_succeeded": _session_event,
    "checkout.session.async_payment_failed": _session_event,
    "charge.refunded": _refund_event,
    "charge.dispute.created": _dispute_event,
    "charge.dispute.closed": _dispute_event,
}


def _object(event: _Event, kind: type[_T]) -> _T:
    """The event's ``data.object`` as ``kind``; a 400 naming the field otherwise."""
    try:
        return convert_fields(event.data.object, kind)
    except ApiError as refused:
        inner = refused.param if refused.param not in (None, "body") else None
        raise invalid_value(
            f"data.object.{inner}" if inner else "data.object",
            f"The {event.type} event's data.object is not as Stripe sends it. {refused.message}",
        ) from None


def _credits(metadata: dict[str, str]) -> int | None:
    """``metadata.svc_credits`` when it is a positive integer in plain digits."""
    text = metadata.get(CREDITS_FIELD)
    if text is None or not (text.isascii() and text.isdigit()):
        return None
    try:
        credits = int(text)
    except ValueError:  # more digits than Python converts (4,300): no real purchase
        return None
    return credits if credits > 0 else None
