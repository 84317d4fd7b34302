"""The reseller's books end to end (issue 52) on a real ``svc serve`` in front of the mock
upstream, priced in the models file: a Stripe purchase and completions, flushed, then
``GET /admin/v1/books`` (JSON and CSV), ``svc admin books`` and the accounts' overview say
what users paid, what the requests cost upstream (each request's own cost, from the
operator's view of it, summed) and the margin; and nothing an account's own key reads
names an upstream or a cost."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin
from tests.support import stripe_signing as stripe

pytestmark = pytest.mark.e2e
SECRET = "whsec_books_e2e"
PRICED = """[providers.mock]
base_url = "{base_url}"
api_key_env = "MOCK_API_KEY"
cost_currency = "USD"

[aliases.svc-fast]
upstreams = [{{ provider = "mock", model = "fast-cached40", cost = {{ {cost} }} }}]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, MockProcess]]:
    mock = start_in_subprocess(chunks=20)
    tmp = tmp_path_factory.mktemp("books")
    models = tmp / "models.toml"
    cost = "input = 0.4, cached_input = 0.1, output = 1.6"
    models.write_text(PRICED.format(base_url=mock.base_url, cost=cost))
    env = {
        "SVC_MODELS_FILE": str(models),
        "MOCK_API_KEY": "mock-provider-key",
        "SVC_STRIPE_WEBHOOK_SECRETS": SECRET,
        "SVC_FLUSH_INTERVAL_S": "0.2",
    }
    srv = start_server(tmp, extra_env=env)
    try:
        yield srv, mock
    finally:
        stop_server(srv.process)
        mock.stop()


def _buy(srv: Server, pid: str) -> None:
    body = stripe.checkout_session(
        account=pid,
        credits="50000",
        amount_total=1999,
        session_id="cs_books",
        payment_intent="pi_books",
    )
    signed = stripe.sign(body, SECRET, int(time.time()))
    r = httpx.post(
        f"{srv.base_url}/purchases/stripe",
        content=body,
        headers={"stripe-signature": signed, "content-type": "application/json"},
    )
    assert r.status_code == 200, r.text


def _chat(srv: Server, key: str) -> None:
    r = httpx.post(
        f"{srv.base_url}/chat/completions",
        json={
            "model": "svc-fast",
            "messages": [{"role": "user", "content": "Tell me about the books. " * 30}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text


def test_the_books_say_what_users_paid_what_upstream_cost_and_the_margin(
    server: tuple[Server, MockProcess], tmp_path: Path
) -> None:
    srv, _ = server
    pid = srv.new_account(0)
    key = srv.new_key(pid)
    _buy(srv, pid)
    for _ in range(3):
        _chat(srv, key)
    code, out = svc_admin(srv.env, "flush")
    assert code == 0, out
    today = datetime.now(UTC).strftime("%Y-%m-%d")

    rows = srv.admin("GET", f"/accounts/{pid}/activity").json()["data"]
    assert len(rows) == 3
    costs = []
    for row in rows:
        one = srv.admin("GET", f"/accounts/{pid}/activity/{row['id']}").json()
        costs.append(one["upstream"]["cost_micros"])
        assert one["upstream"]["provider"] == "mock"
    assert all(c > 0 for c in costs)

    books = srv.admin("GET", f"/books?from={today}&to={today}")
    assert books.status_code == 200, books.text
    total = books.json()["total"]
    (usd,) = [r for r in total["revenue"] if r["currency"] == "usd" or r["currency"] == "USD"]
    assert usd["gross_micros"] == 19_990_000  # 19.99 USD as Stripe reported it, in micros
    assert usd["credits_sold"] == 50_000
    (cost,) = total["costs"]
    assert (cost["alias"], cost["provider"], cost["requests"]) == ("svc-fast", "mock", 3)
    assert cost["cost_micros"] == sum(costs)
    assert total["credits"]["spent"] == cost["credits"]
    (margin,) = total["margins"]
    assert margin["margin_micros"] == margin["value_micros"] - sum(costs)

    as_csv = srv.admin("GET", f"/books?from={today}&to={today}&format=csv")
    assert as_csv.status_code == 200
    assert as_csv.headers["content-type"].startswith("text/csv")
    assert list(csv.reader(io.StringIO(as_csv.text)))[1:]  # a header and figures
    code, out = svc_admin(srv.env, "books", "--from", today, "--to", today)
    assert code == 0, out
    assert out["total"]["costs"][0]["cost_micros"] == sum(costs)  # type: ignore[index]

    overview = srv.admin("GET", "/accounts?sort=spend&days=1").json()
    first = overview["data"][0]
    assert (first["id"], first["spend"]) == (pid, cost["credits"])  # the only spender
    assert first["balance"] == 50_000 - cost["credits"]
    assert overview["totals"]["credits_outstanding"] >= first["balance"]

    # an account's own key reads no upstream and no cost
    auth = {"authorization": f"Bearer {key}"}
    for path in ("/activity", f"/activity/{rows[0]['id']}", "/usage"):
        text = httpx.get(f"{srv.base_url}{path}", headers=auth).text
        for name in ("cost_micros", '"upstream":', '"provider"'):
            assert name not in text, (path, text[max(0, text.find(name) - 200) :][:400])
