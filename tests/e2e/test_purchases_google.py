"""Google Play purchases on a real server (issue 47 item 3: 2 workers, the embedded Valkey,
SQLite), against a local stand-in for Google's token endpoint, Play Developer API and OIDC
certificates (``tests.support.google_play``, keys made here): a purchase the app sends
twice while its notification arrives is credited and consumed once; a token sent by another
account credits only its own; wrong product, package, account token and push tokens write
nothing; a pending purchase is credited when it completes; Google down is a 503 and the
retry credits once; voided after spending is debt and 402. Reconcile clean after each."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin
from tests.support import google_play as play

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def google(tmp_path_factory: pytest.TempPathFactory) -> Iterator[play.FakeGoogle]:
    with play.FakeGoogle(tmp_path_factory.mktemp("google")) as fake:
        yield fake


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, google: play.FakeGoogle) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("purchases-google"), workers=2, extra_env=google.env()
    )
    yield srv
    stop_server(srv.process)


@pytest.fixture(autouse=True)
def google_up(google: play.FakeGoogle) -> None:
    google.down = google.consume_down = False


class App:
    """The companion app of one account: its live key and app account token."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.pid = server.new_account(0)
        self.auth = {"authorization": f"Bearer {server.new_key(self.pid)}"}
        got = httpx.get(f"{server.base_url}/purchases/account-token", headers=self.auth)
        self.token = str(got.json()["app_account_token"])

    def send(self, token: str, product: str = "credits_small") -> httpx.Response:
        return httpx.post(
            f"{self.server.base_url}/purchases/google",
            json={"product_id": product, "purchase_token": token},
            headers=self.auth,
            timeout=30,
        )

    def credits(self) -> tuple[int, int]:
        got = self.server.admin("GET", f"/accounts/{self.pid}/credits").json()
        return got["total_available"], got["debt"]

    def ledger(self) -> list[tuple[str, int, str, str]]:
        got = httpx.get(f"{self.server.base_url}/credits/ledger", headers=self.auth).json()
        return [(e["kind"], e["credits"], e["source"], e["reference"]) for e in got["data"]]


def _notify(
    server: Server, google: play.FakeGoogle, body: bytes, token: str | None = None
) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/purchases/google/notifications",
        content=body,
        headers={"authorization": f"Bearer {token or google.push_token()}"},
        timeout=30,
    )


def _bought(token: str) -> dict[str, Any]:
    return {
        "packageName": play.PACKAGE,
        "oneTimeProductNotification": {
            "version": "1.0",
            "notificationType": 1,
            "purchaseToken": token,
            "sku": "credits_small",
        },
    }


def _clean(server: Server) -> None:
    code, report = svc_admin(server.env, "reconcile")
    assert code == 0, report
    assert report["pending_entries"] == 0


def _consumes(google: play.FakeGoogle, token: str) -> int:
    return sum(1 for t, _ in google.calls.consumes if t == token)


def test_sent_twice_while_notified_is_credited_and_consumed_once(
    server: Server, google: play.FakeGoogle
) -> None:
    app = App(server)
    google.add("e2e-race", play.Purchase("credits_small", app.token, "GPA.E2E-1"))
    push = google.push(_bought("e2e-race"))

    async def all_at_once() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            body = {"product_id": "credits_small", "purchase_token": "e2e-race"}
            sends = [
                client.post("/purchases/google", json=body, headers=app.auth) for _ in range(2)
            ]
            note = client.post(
                "/purchases/google/notifications",
                content=push,
                headers={"authorization": f"Bearer {google.push_token()}"},
            )
            return await asyncio.gather(*sends, note)

    answers = asyncio.run(all_at_once())
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    assert [a.json()["result"] for a in answers].count("applied") == 1
    assert app.credits() == (1000, 0)
    assert app.ledger() == [("purchase", 1000, "google", "GPA.E2E-1")]
    assert _consumes(google, "e2e-race") == 1
    assert google.purchases["e2e-race"].consumed == 1
    again = app.send("e2e-race")
    assert (again.status_code, again.json()["result"]) == (200, "duplicate")
    assert _consumes(google, "e2e-race") == 1
    samples = server.metrics()
    applied = (("event", "paid"), ("result", "applied"), ("store", "google"))
    assert samples[("svc_purchase_events_total", applied)] >= 1
    _clean(server)


def test_a_token_sent_by_another_account_credits_only_its_own(
    server: Server, google: play.FakeGoogle
) -> None:
    owner, other = App(server), App(server)
    google.add("e2e-owner", play.Purchase("credits_small", owner.token, "GPA.E2E-2"))
    refused = other.send("e2e-owner")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "account_token_mismatch"
    assert other.credits() == (0, 0)
    assert _consumes(google, "e2e-owner") == 0
    assert owner.send("e2e-owner").json() == {
        "status": "credited",
        "result": "applied",
        "object": "google_purchase",
    }
    assert (owner.credits(), other.credits()) == ((1000, 0), (0, 0))
    _clean(server)


def test_wrong_products_packages_and_tokens_write_nothing(
    server: Server, google: play.FakeGoogle
) -> None:
    app = App(server)
    google.add(
        "e2e-other-app", play.Purchase("credits_small", app.token, "GPA.E2E-3", package="com.other")
    )
    google.add("e2e-small", play.Purchase("credits_small", app.token, "GPA.E2E-4"))
    cases = [
        (app.send("e2e-other-app"), 400, "invalid_google_purchase"),
        (app.send("e2e-small", "credits_large"), 400, "invalid_google_purchase"),
        (app.send("e2e-small", "credits_unsold"), 400, "invalid_value"),
        (app.send("e2e-unknown"), 400, "invalid_google_purchase"),
        (app.send("not a token"), 400, "invalid_value"),
    ]
    for answer, status, code in cases:
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
    test_key = server.new_key(app.pid, environment="test")
    forbidden = httpx.post(
        f"{server.base_url}/purchases/google",
        json={"product_id": "credits_small", "purchase_token": "e2e-small"},
        headers={"authorization": f"Bearer {test_key}"},
    )
    assert forbidden.status_code == 403
    push = google.push(_bought("e2e-small"), "e2e-msg-bad")
    for token in (
        google.push_token(exp=1_700_000_000, iat=1_699_990_000),
        google.push_token(key=play.rsa_key()),
        google.push_token(aud="https://attacker.example/"),
        google.push_token(email="else@x.iam.gserviceaccount.com"),
        "not-a-jwt",
    ):
        answer = _notify(server, google, push, token)
        assert answer.status_code == 401, answer.text
        assert answer.json()["error"]["code"] == "invalid_push_token"
    assert app.credits() == (0, 0)
    assert app.ledger() == []
    assert _consumes(google, "e2e-small") == 0
    _clean(server)


def test_a_pending_purchase_is_credited_when_it_completes(
    server: Server, google: play.FakeGoogle
) -> None:
    app = App(server)
    google.add("e2e-pending", play.Purchase("credits_small", app.token, "GPA.E2E-5", state=2))
    pending = app.send("e2e-pending")
    assert (pending.status_code, pending.json()["status"]) == (202, "pending")
    assert app.credits() == (0, 0)
    google.purchases["e2e-pending"].state = 0
    assert (
        _notify(server, google, google.push(_bought("e2e-pending"))).json()["result"] == "applied"
    )
    assert app.credits() == (1000, 0)
    assert _consumes(google, "e2e-pending") == 1
    _clean(server)


def test_google_down_is_a_503_and_the_retry_credits_once(
    server: Server, google: play.FakeGoogle
) -> None:
    app = App(server)
    google.add("e2e-down", play.Purchase("credits_small", app.token, "GPA.E2E-6"))
    google.down = True
    down = app.send("e2e-down")
    assert (down.status_code, down.json()["error"]["code"]) == (503, "service_unavailable")
    push = google.push(_bought("e2e-down"), "e2e-msg-down")
    assert _notify(server, google, push).status_code == 503
    assert app.credits() == (0, 0)
    google.down = False
    assert _notify(server, google, push).json()["result"] == "applied"
    assert _notify(server, google, push).json()["result"] == "duplicate"
    assert app.send("e2e-down").json()["result"] == "duplicate"
    assert app.credits() == (1000, 0)
    assert _consumes(google, "e2e-down") == 1
    _clean(server)


def test_voided_after_spending_is_debt_and_402(server: Server, google: play.FakeGoogle) -> None:
    app = App(server)
    google.add("e2e-void", play.Purchase("credits_small", app.token, "GPA.E2E-7"))
    assert app.send("e2e-void").json()["result"] == "applied"
    spent = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]},
        headers=app.auth,
        timeout=30,
    )
    assert spent.status_code == 200, spent.text
    used = 1000 - app.credits()[0]
    assert used > 0
    voided = {
        "packageName": play.PACKAGE,
        "voidedPurchaseNotification": {
            "purchaseToken": "e2e-void",
            "orderId": "GPA.E2E-7",
            "productType": 2,
            "refundType": 1,
        },
    }
    assert _notify(server, google, google.push(voided)).json()["result"] == "applied"
    assert _notify(server, google, google.push(voided)).json()["result"] == "duplicate"
    assert app.credits() == (0, used)
    refused = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]},
        headers=app.auth,
        timeout=30,
    )
    assert (refused.status_code, refused.json()["error"]["code"]) == (402, "account_in_debt")
    _clean(server)
