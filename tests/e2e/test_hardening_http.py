"""Issue 30, end to end on a real server: an Idempotency-Key's record belongs to one
environment (a test key's simulated answer is never a live key's, nor the reverse), a JSON
route's answer of any size is kept and replayed, and a client that leaves mid-upload is
one INFO line and a 499, not an ERROR with a traceback and a 500."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import Server, start_server
from tests.support.processes import stop_process as stop_server

pytestmark = pytest.mark.e2e
MSG = [{"role": "user", "content": "tell me a story"}]
CHAT = {"model": "svc-fast", "messages": MSG, "max_tokens": 20}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One worker (its log and metrics are the whole server's); webhooks may point at
    127.0.0.1 (the URL check lets it through, so no lookup leaves the machine)."""
    server = start_server(
        tmp_path_factory.mktemp("hardening"),
        workers=1,
        extra_env={"SVC_WEBHOOK_ALLOW_HOSTS": "127.0.0.1"},
    )
    yield server
    stop_server(server.process)


def _h(key: str, idem: str | None = None) -> dict[str, str]:
    headers = {"authorization": f"Bearer {key}"}
    if idem is not None:
        headers["idempotency-key"] = idem
    return headers


def _svc(body: bytes) -> dict[str, int]:
    """The svc metadata of a stream's bytes (chat's last chunk, or the response object of
    the Responses API's last event)."""
    lines = body.decode().splitlines()
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    last = events[-1]
    return dict(last["svc"] if "svc" in last else last["response"]["svc"])


def _stream(srv: Server, path: str, key: str, idem: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{srv.base_url}{path}", json=body, headers=_h(key, idem), timeout=60)


def _requests_today(srv: Server, key: str, environment: str) -> int:
    usage = httpx.get(f"{srv.base_url}/usage?days=1", headers=_h(key)).json()
    return int(usage["daily"][0]["requests_count"]) if environment == "live" else 0


# -- item 3: the environment is part of an Idempotency-Key's record -------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [("/chat/completions", CHAT), ("/responses", {"model": "svc-fast", "input": "hi"})],
    ids=["chat", "responses"],
)
def test_a_live_key_is_served_for_real_after_a_test_key_used_the_idempotency_key(
    srv: Server, path: str, body: dict[str, object]
) -> None:
    pid = srv.new_account(100_000)
    test, live = srv.new_key(pid, environment="test"), srv.new_key(pid)
    simulated = _stream(srv, path, test, "order-1", body)
    assert simulated.status_code == 200
    assert srv.balance(pid) == 100_000  # a test key deducts nothing
    served = _stream(srv, path, live, "order-1", body)
    assert served.status_code == 200
    assert "idempotent-replayed" not in served.headers
    assert served.content != simulated.content
    charged = 100_000 - srv.balance(pid)
    assert charged == _svc(served.content)["credits_used"] > 0
    # and the live key's own record replays its own answer, charged once
    again = _stream(srv, path, live, "order-1", body)
    assert (again.headers["idempotent-replayed"], again.content) == ("true", served.content)
    assert 100_000 - srv.balance(pid) == charged


def test_a_test_key_is_served_after_a_live_key_used_the_idempotency_key(srv: Server) -> None:
    pid = srv.new_account(100_000)
    test, live = srv.new_key(pid, environment="test"), srv.new_key(pid)
    served = _stream(srv, "/chat/completions", live, "order-2", CHAT)
    charged = 100_000 - srv.balance(pid)
    assert charged == _svc(served.content)["credits_used"] > 0
    simulated = _stream(srv, "/chat/completions", test, "order-2", CHAT)
    assert simulated.status_code == 200
    assert "idempotent-replayed" not in simulated.headers
    assert simulated.content != served.content
    # the test key got its own simulated answer: its metadata shows the live balance
    # untouched since, and nothing more was charged
    assert _svc(simulated.content)["balance_remaining"] == 100_000 - charged
    assert 100_000 - srv.balance(pid) == charged


def test_an_operators_idempotency_key_is_not_the_accounts(srv: Server) -> None:
    pid = srv.new_account(1_000)
    manager = srv.new_key(pid, role="admin")
    body = {"name": "ci", "environment": "live", "daily_cap_credits": None}
    by_operator = httpx.post(
        f"{srv.root_url}/admin/v1/accounts/{pid}/api-keys",
        json=body,
        headers={"authorization": f"Bearer {srv.admin_token}", "idempotency-key": "k-1"},
    )
    assert by_operator.status_code == 201
    by_key = httpx.post(f"{srv.base_url}/api-keys", json=body, headers=_h(manager, "k-1"))
    assert by_key.status_code == 201, by_key.text  # its own request, not another's key reused
    assert by_key.json()["id"] != by_operator.json()["id"]


# -- item 9: an idempotent JSON answer of any size is kept ----------------------------------


def test_a_webhook_with_a_long_non_ascii_url_is_created_once_and_replayed(srv: Server) -> None:
    pid = srv.new_account(1_000)
    manager = srv.new_key(pid, role="admin")
    url = "http://127.0.0.1:9/" + "é" * 2000  # 2,019 characters, 4,019 bytes: a 4 KB+ answer
    body = {"url": url, "events": ["key.revoked"], "description": "ü" * 256}
    first = httpx.post(f"{srv.base_url}/webhooks", json=body, headers=_h(manager, "wh-1"))
    assert first.status_code == 201, first.text
    assert len(first.content) > 4_096
    again = httpx.post(f"{srv.base_url}/webhooks", json=body, headers=_h(manager, "wh-1"))
    assert (again.status_code, again.content) == (201, first.content)
    assert again.headers["idempotent-replayed"] == "true"
    listed = httpx.get(f"{srv.base_url}/webhooks", headers=_h(manager)).json()["data"]
    assert [w["id"] for w in listed] == [first.json()["id"]]


# -- item 11: a client that leaves mid-upload -----------------------------------------------


def _port(srv: Server) -> int:
    return int(srv.root_url.rsplit(":", 1)[1])


def _leave_mid_upload(srv: Server, path: str, authorization: str) -> None:
    """Declare a 1,000-byte body, send 10 bytes of it, and hang up."""
    with socket.create_connection(("127.0.0.1", _port(srv)), timeout=10) as conn:
        head = (
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: {authorization}\r\n"
            "content-type: application/json\r\ncontent-length: 1000\r\n\r\n"
        )
        conn.sendall(head.encode() + b'{"name": "')
        time.sleep(0.3)  # the request has reached the handler, which waits for the rest


def _requests(srv: Server, status: str) -> dict[str, float]:
    """svc_requests_total by route, for one status."""
    return {
        dict(labels)["route"]: value
        for (name, labels), value in srv.metrics().items()
        if name == "svc_requests_total" and dict(labels)["status"] == status
    }


def _wait_for(predicate: object, seconds: float = 10) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("path", "route", "admin"),
    [
        ("/v1/api-keys", "/v1/api-keys", False),
        ("/admin/v1/accounts/{pid}/grants", "/admin/v1/accounts/{pid}/grants", True),
        ("/v1/chat/completions", "/v1/chat/completions", False),
    ],
    ids=["api-keys", "admin-grants", "chat"],
)
def test_a_client_that_leaves_mid_upload_is_an_info_line_and_a_499(
    srv: Server, path: str, route: str, admin: bool
) -> None:
    pid = srv.new_account(1_000)
    authorization = f"Bearer {srv.admin_token if admin else srv.new_key(pid, role='admin')}"
    logged = len(srv.log_entries())
    before_499 = _requests(srv, "499").get(route, 0)
    before_500 = sum(_requests(srv, "500").values())
    _leave_mid_upload(srv, path.format(pid=pid), authorization)
    _wait_for(lambda: _requests(srv, "499").get(route, 0) == before_499 + 1)
    assert sum(_requests(srv, "500").values()) == before_500
    entries = srv.log_entries()[logged:]
    assert [e for e in entries if e["level"] in ("error", "critical")] == []
    assert not any("exc" in e or "Traceback" in e["msg"] for e in entries)
    left = [e for e in entries if "client disconnected" in e["msg"]]
    assert [e["level"] for e in left] == ["info"]
    assert srv.balance(pid) == 1_000  # nothing ran
