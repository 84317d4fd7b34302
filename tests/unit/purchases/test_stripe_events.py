"""Stripe's events as svc reads them (app.purchases.stripe_events): each type svc acts on
normalized into one PaymentEvent, every other type ignored, a malformed body a 400 naming
the field."""

from __future__ import annotations

import json

import pytest

from app.core.errors import ApiError, ErrorKind
from app.purchases.events import PaymentEvent
from app.purchases.stripe_events import payment_event
from tests.support.stripe_signing import charge_refunded, checkout_session, dispute


def _refused(body: bytes) -> ApiError:
    with pytest.raises(ApiError) as refused:
        payment_event(body)
    assert (refused.value.kind, refused.value.status) == (ErrorKind.INVALID_VALUE, 400)
    return refused.value


def _with_object(body: bytes, **changes: object) -> bytes:
    """``body`` with fields of its data.object replaced (a value of ... removes the field)."""
    event = json.loads(body)
    for name, value in changes.items():
        if value is ...:
            del event["data"]["object"][name]
        else:
            event["data"]["object"][name] = value
    return json.dumps(event).encode()


def test_a_paid_checkout_session_is_a_purchase() -> None:
    body = checkout_session(
        session_id="cs_test_paid",
        account="acct_buyer",
        credits="25000",
        payment_intent="pi_paid",
        amount_total=499,
        currency="eur",
        event_id="evt_paid",
    )
    assert payment_event(body) == PaymentEvent(
        kind="paid",
        event_id="evt_paid",
        event_type="checkout.session.completed",
        session_id="cs_test_paid",
        payment_intent="pi_paid",
        client_reference_id="acct_buyer",
        credits=25000,
        amount_total=499,
        currency="eur",
    )


def test_a_completed_session_not_paid_yet_is_pending() -> None:
    event = payment_event(checkout_session(payment_status="unpaid", payment_intent=None))
    assert (event.kind, event.session_id, event.credits) == ("pending", "cs_test_a1", 1000)
    assert event.payment_intent is None


def test_an_async_payment_that_succeeds_is_a_purchase_and_one_that_fails_is_not() -> None:
    succeeded = payment_event(checkout_session("checkout.session.async_payment_succeeded"))
    assert (succeeded.kind, succeeded.session_id, succeeded.credits) == ("paid", "cs_test_a1", 1000)
    failed = payment_event(
        checkout_session("checkout.session.async_payment_failed", payment_status="unpaid")
    )
    assert (failed.kind, failed.session_id, failed.client_reference_id) == (
        "failed",
        "cs_test_a1",
        "acct_test",
    )


def test_an_external_id_names_the_account_as_it_is() -> None:
    assert payment_event(checkout_session(account="user-42@app")).client_reference_id == (
        "user-42@app"
    )
    assert payment_event(checkout_session(account=None)).client_reference_id is None


@pytest.mark.parametrize(
    ("credits", "parsed"),
    [
        ("1", 1),
        ("1000000", 1_000_000),
        ("007", 7),
        (None, None),
        ("", None),
        ("0", None),
        ("-5", None),
        ("+5", None),
        (" 5", None),
        ("5.0", None),
        ("1e3", None),
        ("²", None),
        ("٣", None),  # a digit to str.isdigit, not ASCII
        ("9" * 5000, None),  # more digits than int() converts
    ],
)
def test_svc_credits_is_a_positive_integer_or_none(credits: str | None, parsed: int | None) -> None:
    event = payment_event(checkout_session(credits=credits))
    assert (event.kind, event.credits) == ("paid", parsed)


def test_a_refund_reports_the_cumulative_amount() -> None:
    body = charge_refunded(payment_intent="pi_r", amount=1000, amount_refunded=250, event_id="e1")
    assert payment_event(body) == PaymentEvent(
        kind="refunded",
        event_id="e1",
        event_type="charge.refunded",
        payment_intent="pi_r",
        amount=1000,
        amount_refunded=250,
        currency="usd",
    )


def test_a_dispute_opened_won_and_lost() -> None:
    opened = payment_event(dispute(dispute_id="du_1", payment_intent="pi_d", event_id="e2"))
    assert opened == PaymentEvent(
        kind="dispute_opened",
        event_id="e2",
        event_type="charge.dispute.created",
        payment_intent="pi_d",
        dispute_id="du_1",
        dispute_status="needs_response",
        currency="usd",
    )
    won = payment_event(dispute("charge.dispute.closed", status="won"))
    assert (won.kind, won.dispute_id, won.payment_intent) == (
        "dispute_won",
        "du_test_1",
        "pi_test_1",
    )
    for status in ("lost", "warning_closed", "prevented"):
        closed = payment_event(dispute("charge.dispute.closed", status=status))
        assert (closed.kind, closed.dispute_status) == ("dispute_lost", status)


def test_a_charge_without_a_payment_intent_is_none_of_svc_s() -> None:
    assert payment_event(charge_refunded(payment_intent=None)).kind == "ignored"
    assert payment_event(dispute(payment_intent=None)).kind == "ignored"


@pytest.mark.parametrize(
    "event_type",
    ["customer.created", "payment_intent.succeeded", "checkout.session.expired", "charge.refund"],
)
def test_other_types_are_ignored_whatever_their_object(event_type: str) -> None:
    body = json.dumps(
        {"id": "evt_other", "type": event_type, "data": {"object": {"amount": "not a number"}}}
    ).encode()
    assert payment_event(body) == PaymentEvent(
        kind="ignored", event_id="evt_other", event_type=event_type
    )


def test_a_body_that_is_not_an_event_is_refused() -> None:
    _refused(b"")
    _refused(b"not json")
    _refused(b"[]")
    assert _refused(b'{"id": "evt_1", "type": "charge.refunded"}').param == "data"
    assert _refused(b'{"type": "x", "data": {"object": {}}}').param == "id"
    assert _refused(b'{"id": "evt_1", "data": {"object": {}}}').param == "type"
    assert _refused(b'{"id": "", "type": "x", "data": {"object": {}}}').param == "id"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (charge_refunded(), "amount_refunded"),
        (charge_refunded(), "amount"),
        (charge_refunded(), "payment_intent"),
        (checkout_session(), "payment_status"),
        (checkout_session(), "id"),
        (dispute(), "status"),
        (dispute(), "payment_intent"),
    ],
)
def test_a_known_type_without_a_field_svc_reads_is_refused(body: bytes, field: str) -> None:
    error = _refused(_with_object(body, **{field: ...}))
    assert error.param == f"data.object.{field}"
    assert "data.object" in error.message


@pytest.mark.parametrize(
    ("body", "changes", "param"),
    [
        (charge_refunded(), {"amount_refunded": "250"}, "data.object.amount_refunded"),
        (charge_refunded(), {"amount_refunded": -1}, "data.object.amount_refunded"),
        (charge_refunded(), {"amount": 0}, "data.object.amount"),
        (charge_refunded(), {"object": "refund"}, "data.object.object"),
        (checkout_session(), {"metadata": {"svc_credits": 1000}}, "data.object.metadata"),
        (checkout_session(), {"payment_intent": {"id": "pi_1"}}, "data.object.payment_intent"),
        (dispute(), {"status": None}, "data.object.status"),
    ],
)
def test_a_known_type_with_a_field_of_the_wrong_kind_is_refused(
    body: bytes, changes: dict[str, object], param: str
) -> None:
    assert _refused(_with_object(body, **changes)).param.startswith(param)  # type: ignore[union-attr]


def test_a_known_type_whose_object_is_not_an_object_is_refused() -> None:
    body = json.dumps({"id": "e", "type": "charge.refunded", "data": {"object": []}}).encode()
    assert _refused(body).param == "data.object"
