"""App Store purchases on a real server (issue 47 item 2: 2 workers, the embedded Valkey,
SQLite), with transactions and notifications signed by a throwaway CA with Apple's OIDs
(its root given as SVC_APPLE_ROOT_CERTS) and a stand-in App Store Server API: a purchase
credited once when the app sends it twice while its notification arrives; one transaction
sent by two accounts credited to its token's account only; another bundle, environment,
product, chain, an expired or a forged signature refused with nothing written; a refund
after spending is debt and 402, then reversed; a consumption request sends the share
spent. The metric and `svc admin reconcile` clean after each."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin
from tests.support import apple_signing as apple
from tests.support.apple_api import StandIn, app_store_api

pytestmark = pytest.mark.e2e
CA = apple.AppleCA()
PRODUCTS = "credits.small=1000,credits.large=5000"
CHAT = {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def api() -> Iterator[StandIn]:
    with app_store_api() as stand_in:
        yield stand_in


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, api: StandIn) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("apple")
    key_file = tmp / "SubscriptionKey_E2E.p8"
    key_file.write_bytes(apple.private_key_pem())
    srv = start_server(
        tmp,
        workers=2,
        extra_env={
            "SVC_APPLE_BUNDLE_ID": apple.BUNDLE_ID,
            "SVC_APPLE_ENVIRONMENT": "Sandbox",
            "SVC_APPLE_PRODUCTS": PRODUCTS,
            "SVC_APPLE_ROOT_CERTS": str(CA.write_root(tmp / "root.cer")),
            "SVC_APPLE_CONSUMPTION_CONSENT": "true",
            "SVC_APPLE_API_KEY_ID": "E2EKEY",
            "SVC_APPLE_API_ISSUER_ID": "e2e-issuer",
            "SVC_APPLE_API_PRIVATE_KEY_FILE": str(key_file),
            "SVC_APPLE_API_URL": api.url,
        },
    )
    yield srv
    stop_server(srv.process)


class Buyer:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.pid = server.new_account(0)
        self.auth = {"authorization": f"Bearer {server.new_key(self.pid)}"}
        answer = httpx.get(f"{server.base_url}/purchases/account-token", headers=self.auth)
        self.token = str(answer.json()["app_account_token"])

    def send(self, signed: str) -> httpx.Response:
        return httpx.post(
            f"{self.server.base_url}/purchases/apple",
            json={"signed_transaction": signed},
            headers=self.auth,
            timeout=30,
        )

    def credits(self) -> tuple[int, int]:
        got = self.server.admin("GET", f"/accounts/{self.pid}/credits").json()
        return got["total_available"], got["debt"]

    def ledger(self) -> list[tuple[str, int, int]]:
        got = self.server.admin("GET", f"/accounts/{self.pid}/ledger").json()
        return sorted((e["kind"], e["credits"], e["debt_change"]) for e in got["data"])


def _notify(server: Server, signed_payload: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/purchases/apple/notifications",
        json={"signedPayload": signed_payload},
        timeout=30,
    )


def _result(server: Server, signed_payload: str) -> str:
    answer = _notify(server, signed_payload)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["result"])


def _tx(token: str | None, **kw: Any) -> tuple[str, str]:
    tx_id = apple.transaction_id()
    return tx_id, CA.sign(apple.transaction(token, transaction_id=tx_id, **kw))


def _clean(server: Server) -> None:
    code, report = svc_admin(server.env, "reconcile")
    assert code == 0, report
    assert report["pending_entries"] == 0


def _purchase_ids(server: Server) -> set[str]:
    listed = server.admin("GET", "/purchases?limit=100").json()["data"]
    return {p["id"] for p in listed}


def test_sent_twice_while_its_notification_arrives_it_is_credited_once(server: Server) -> None:
    buyer = Buyer(server)
    tx_id, signed = _tx(buyer.token, product_id="credits.large")
    charge = apple.notification(CA, "ONE_TIME_CHARGE", signed)

    async def all_at_once() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            app = {"json": {"signed_transaction": signed}, "headers": buyer.auth}
            return await asyncio.gather(
                client.post("/purchases/apple", **app),
                client.post("/purchases/apple", **app),
                client.post("/purchases/apple/notifications", json={"signedPayload": charge}),
            )

    answers = asyncio.run(all_at_once())
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    assert [a.json()["result"] for a in answers].count("applied") == 1
    first = answers[0].json()
    assert first["object"] == "purchase"
    assert (first["id"], first["transaction_id"], first["credits"], first["status"]) == (
        f"apple:{tx_id}",
        tx_id,
        5000,
        "granted",
    )
    assert buyer.credits() == (5000, 0)
    assert buyer.ledger() == [("purchase", 5000, 0)]
    again = buyer.send(signed)
    assert (again.status_code, again.json()["result"]) == (200, "duplicate")
    assert _result(server, charge) == "duplicate"
    assert buyer.credits() == (5000, 0)
    samples = server.metrics()
    applied = (("event", "paid"), ("result", "applied"), ("store", "apple"))
    assert samples[("svc_purchase_events_total", applied)] == 1
    _clean(server)


def test_one_transaction_sent_by_two_accounts_goes_to_its_tokens_account(
    server: Server,
) -> None:
    buyer, other = Buyer(server), Buyer(server)
    tx_id, signed = _tx(buyer.token)
    refused = other.send(signed)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert (error["code"], error["param"]) == (
        "account_token_mismatch",
        "signed_transaction.appAccountToken",
    )
    assert f"apple:{tx_id}" not in _purchase_ids(server)
    assert buyer.send(signed).status_code == 200
    assert other.send(signed).status_code == 400
    assert (buyer.credits(), other.credits()) == ((1000, 0), (0, 0))
    assert other.ledger() == []
    _clean(server)


@pytest.mark.parametrize(
    ("case", "code", "param"),
    [
        ("bundle", "invalid_apple_signature", "signed_transaction"),
        ("environment", "invalid_apple_signature", "signed_transaction"),
        ("product", "invalid_value", "signed_transaction"),
        ("chain", "invalid_apple_signature", "signed_transaction"),
        ("expired", "invalid_apple_signature", "signed_transaction"),
        ("forged", "invalid_apple_signature", "signed_transaction"),
        ("revoked", "invalid_value", "signed_transaction"),
        ("no body", "invalid_value", "signed_transaction"),
    ],
)
def test_a_bad_transaction_is_refused_with_nothing_written(
    server: Server, case: str, code: str, param: str
) -> None:
    buyer = Buyer(server)
    tx_id = apple.transaction_id()
    changes: dict[str, Any] = {
        "bundle": {"bundle_id": "com.example.other"},
        "environment": {"environment": "Production"},
        "product": {"product_id": "credits.unknown"},
        "revoked": {"revoked": True},
    }.get(case, {})
    payload = apple.transaction(buyer.token, transaction_id=tx_id, **changes)
    signed = CA.sign(payload)
    if case == "chain":
        signed = apple.AppleCA("Rogue").sign(payload)
    elif case == "expired":
        signed = CA.expired().sign(payload)
    elif case == "forged":
        head, _, sig = signed.split(".")
        signed = f"{head}.{CA.sign({**payload, 'productId': 'credits.large'}).split('.')[1]}.{sig}"
    answer = (
        httpx.post(f"{server.base_url}/purchases/apple", json={}, headers=buyer.auth, timeout=30)
        if case == "no body"
        else buyer.send(signed)
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["param"]) == (code, param)
    if case != "no body":  # the notification carrying it is refused alike, or ignored
        notified = _notify(server, apple.notification(CA, "ONE_TIME_CHARGE", signed))
        assert notified.status_code in (200, 400), notified.text
    assert f"apple:{tx_id}" not in _purchase_ids(server)
    assert buyer.credits() == (0, 0)
    assert buyer.ledger() == []


def test_a_refund_after_spending_is_debt_and_402_then_reversed(server: Server) -> None:
    buyer = Buyer(server)
    _, signed = _tx(buyer.token)
    assert buyer.send(signed).status_code == 200
    spent = httpx.post(f"{server.base_url}/chat/completions", json=CHAT, headers=buyer.auth)
    assert spent.status_code == 200, spent.text
    used = 1000 - buyer.credits()[0]
    assert used > 0
    assert _result(server, apple.notification(CA, "REFUND", signed)) == "applied"
    assert buyer.credits() == (0, used)
    refused = httpx.post(f"{server.base_url}/chat/completions", json=CHAT, headers=buyer.auth)
    assert refused.status_code == 402
    assert refused.json()["error"]["code"] == "account_in_debt"
    assert _result(server, apple.notification(CA, "REFUND_REVERSED", signed)) == "applied"
    assert buyer.credits() == (1000 - used, 0)
    kinds = [kind for kind, _, _ in buyer.ledger()]
    assert sorted(kinds) == ["purchase", "refund", "refund_reversed"]
    _clean(server)


def test_a_consumption_request_sends_the_share_spent(server: Server, api: StandIn) -> None:
    buyer = Buyer(server)
    tx_id, signed = _tx(buyer.token)
    assert buyer.send(signed).status_code == 200
    spent = httpx.post(f"{server.base_url}/chat/completions", json=CHAT, headers=buyer.auth)
    assert spent.status_code == 200, spent.text
    used = 1000 - buyer.credits()[0]
    before = len(api.received)
    asked = apple.notification(CA, "CONSUMPTION_REQUEST", signed, consumptionRequestReason="OTHER")
    assert _result(server, asked) == "applied"
    (sent,) = api.received[before:]
    assert sent.path == f"/inApps/v2/transactions/consumption/{tx_id}"
    header, claims = sent.bearer_claims()
    assert (header["kid"], claims["iss"], claims["bid"]) == (
        "E2EKEY",
        "e2e-issuer",
        apple.BUNDLE_ID,
    )
    body = sent.json()
    assert body["deliveryStatus"] == "DELIVERED"
    assert body["customerConsented"] is True
    assert body["consumptionPercentage"] == used * 100_000 // 1000
    assert _result(server, asked) == "duplicate"
    assert len(api.received) == before + 1
    assert _result(server, apple.notification(CA, "TEST")) == "ignored"
    _clean(server)
