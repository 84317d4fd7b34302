"""Stripe purchases on a real server (issue 45: 2 workers, the embedded Valkey, SQLite),
with events signed here with a local secret as Stripe signs them: a paid Checkout Session
grants exactly its credits once under 100 concurrent deliveries and both of its events;
refunds and disputes take back what they should, debt when spent, 402 until a purchase
pays it; bad, stale and rotated secrets; unmatched purchases listed for operators; the
ledger, the webhook events' metric and `svc admin reconcile` clean after each. The admin
debit and the ledger through the API and the CLI."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin
from tests.support import stripe_signing as stripe

pytestmark = pytest.mark.e2e
OLD, NEW = "whsec_e2e_retired", "whsec_e2e_current"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("purchases"),
        workers=2,
        extra_env={"SVC_STRIPE_WEBHOOK_SECRETS": f"{OLD},{NEW}"},
    )
    yield srv
    stop_server(srv.process)


def _post(server: Server, body: bytes, secret: str = NEW, at: int | None = None) -> httpx.Response:
    header = stripe.sign(body, secret, int(time.time()) if at is None else at)
    return httpx.post(
        f"{server.base_url}/purchases/stripe",
        content=body,
        headers={"stripe-signature": header, "content-type": "application/json"},
        timeout=30,
    )


def _result(server: Server, body: bytes) -> str:
    answer = _post(server, body)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["result"])


def _credits(server: Server, pid: str) -> tuple[int, int]:
    got = server.admin("GET", f"/accounts/{pid}/credits").json()
    return got["total_available"], got["debt"]


def _clean(server: Server) -> None:
    code, report = svc_admin(server.env, "reconcile")
    assert code == 0, report
    assert report["pending_entries"] == 0


def test_a_paid_session_grants_once_under_concurrent_deliveries(server: Server) -> None:
    pid = server.new_account(0)
    ids = {"session_id": "cs_e2e_once", "payment_intent": "pi_e2e_once"}
    completed = stripe.checkout_session(account=pid, credits="2500", **ids)
    succeeded = stripe.checkout_session(
        "checkout.session.async_payment_succeeded", account=pid, credits="2500", **ids
    )
    header = stripe.sign(completed, NEW, int(time.time()))

    async def deliver_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/purchases/stripe", content=completed, headers={"stripe-signature": header}
                    )
                    for _ in range(100)
                ),
                client.post(
                    "/purchases/stripe",
                    content=succeeded,
                    headers={"stripe-signature": stripe.sign(succeeded, OLD, int(time.time()))},
                ),
            )

    answers = asyncio.run(deliver_all())
    assert {a.status_code for a in answers} == {200}
    assert [a.json()["result"] for a in answers].count("applied") == 1
    assert _credits(server, pid) == (2500, 0)
    key = server.new_key(pid)
    ledger = httpx.get(
        f"{server.base_url}/credits/ledger", headers={"authorization": f"Bearer {key}"}
    ).json()
    (entry,) = ledger["data"]
    assert (entry["kind"], entry["credits"], entry["source"], entry["reference"]) == (
        "purchase",
        2500,
        "stripe",
        "cs_e2e_once",
    )
    samples = server.metrics()
    applied = (("event", "paid"), ("result", "applied"), ("store", "stripe"))
    assert samples[("svc_purchase_events_total", applied)] == 1
    _clean(server)


def test_a_refund_of_spent_credits_is_debt_until_a_purchase_pays_it(server: Server) -> None:
    pid = server.new_account(0)
    key = server.new_key(pid)
    auth = {"authorization": f"Bearer {key}"}
    ids = {"session_id": "cs_e2e_debt", "payment_intent": "pi_e2e_debt"}
    _result(server, stripe.checkout_session(account=pid, credits="1000", **ids))
    spent = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]},
        headers=auth,
        timeout=30,
    )
    assert spent.status_code == 200, spent.text
    used = 1000 - _credits(server, pid)[0]
    assert used > 0
    # two partial refunds, cumulative amounts, delivered twice and out of order
    half = stripe.charge_refunded(payment_intent="pi_e2e_debt", amount=1000, amount_refunded=500)
    whole = stripe.charge_refunded(payment_intent="pi_e2e_debt", amount=1000, amount_refunded=1000)
    assert [_result(server, b) for b in (whole, half, whole, half)] == [
        "applied",
        "duplicate",
        "duplicate",
        "duplicate",
    ]
    assert _credits(server, pid) == (0, used)
    refused = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]},
        headers=auth,
        timeout=30,
    )
    assert refused.status_code == 402
    assert refused.json()["error"]["code"] == "account_in_debt"
    assert str(used) in refused.json()["error"]["message"]
    again = {"session_id": "cs_e2e_debt2", "payment_intent": "pi_e2e_debt2"}
    _result(server, stripe.checkout_session(account=pid, credits="1000", **again))
    assert _credits(server, pid) == (1000 - used, 0)
    _clean(server)


def test_a_dispute_then_its_win_and_a_refund_before_its_purchase(server: Server) -> None:
    pid = server.new_account(0)
    ids = {"session_id": "cs_e2e_dispute", "payment_intent": "pi_e2e_dispute"}
    early = stripe.charge_refunded(
        payment_intent="pi_e2e_dispute", amount=1000, amount_refunded=200
    )
    assert _result(server, early) == "kept"
    _result(server, stripe.checkout_session(account=pid, credits="1000", **ids))
    assert _credits(server, pid) == (800, 0)  # the kept refund applied with its purchase
    opened = stripe.dispute(dispute_id="du_e2e", payment_intent="pi_e2e_dispute")
    assert _result(server, opened) == "applied"
    assert _credits(server, pid) == (0, 0)
    won = stripe.dispute(
        "charge.dispute.closed", dispute_id="du_e2e", payment_intent="pi_e2e_dispute", status="won"
    )
    assert [_result(server, won) for _ in range(2)] == ["applied", "duplicate"]
    assert _credits(server, pid) == (800, 0)
    _clean(server)


def test_bad_stale_and_rotated_signatures(server: Server) -> None:
    pid = server.new_account(0)
    body = stripe.checkout_session(account=pid, credits="10", session_id="cs_e2e_sig")
    for secret, at in (("whsec_wrong", None), (NEW, int(time.time()) - 600)):
        refused = _post(server, body, secret, at)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "invalid_stripe_signature"
        assert NEW not in refused.text
    assert _credits(server, pid) == (0, 0)  # nothing written
    assert _post(server, body, OLD).status_code == 200  # the retired secret, still listed
    assert _credits(server, pid) == (10, 0)


def test_unmatched_purchases_are_listed_for_operators(server: Server) -> None:
    body = stripe.checkout_session(account="nobody-here", credits="10", session_id="cs_e2e_lost")
    assert _result(server, body) == "unmatched"
    listed = server.admin("GET", "/purchases?status=unmatched").json()
    assert "cs_e2e_lost" in [p["reference"] for p in listed["data"]]
    code, out = svc_admin(server.env, "purchases", "--status", "unmatched")
    assert code == 0
    assert "cs_e2e_lost" in [p["reference"] for p in out["data"]]  # type: ignore[index,union-attr]


def test_an_operators_debit_through_the_api_and_the_cli(server: Server) -> None:
    pid = server.new_account(300)
    headers = {"idempotency-key": "debit-e2e-1"}
    debit = httpx.post(
        f"{server.root_url}/admin/v1/accounts/{pid}/debits",
        json={"credits": 500, "reason": "chargeback outside Stripe"},
        headers={"authorization": f"Bearer {server.admin_token}", **headers},
        timeout=30,
    )
    assert debit.status_code == 200, debit.text
    assert (debit.json()["total_available"], debit.json()["debt"]) == (0, 200)
    again = httpx.post(
        f"{server.root_url}/admin/v1/accounts/{pid}/debits",
        json={"credits": 500, "reason": "chargeback outside Stripe"},
        headers={"authorization": f"Bearer {server.admin_token}", **headers},
        timeout=30,
    )
    assert again.json() == debit.json()
    code, granted = svc_admin(server.env, "grant", pid, "250", "--reason", "goodwill")
    assert code == 0
    assert (granted["total_available"], granted["debt"]) == (50, 0)
    code, _ = svc_admin(server.env, "debit", pid, "20", "--reason", "typo")
    assert code == 0
    code, page = svc_admin(server.env, "ledger", pid, "--limit", "2")
    assert code == 0
    data = page["data"]
    assert isinstance(data, list)
    assert [(e["kind"], e["credits"], e["debt_change"]) for e in data] == [
        ("debit", -20, 0),
        ("grant", 50, -200),
    ]
    assert page["has_more"] is True
    audit = server.admin("GET", f"/audit?account={pid}").json()["data"]
    assert [a["action"] for a in audit][:3] == ["credits.debit", "credits.grant", "credits.debit"]
    _clean(server)
