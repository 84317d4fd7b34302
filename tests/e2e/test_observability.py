"""Metrics summed over granian's workers, request ids, and JSON logs, on a real server."""

from __future__ import annotations

import json
import secrets
import socket
import time

import httpx
import openai
import pytest

from tests.e2e.conftest import Samples, Server

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"


def _delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_metrics_add_up_every_worker_and_match_what_clients_were_charged(server: Server) -> None:
    pid = server.new_account(1_000_000)
    key = server.new_key(pid)
    before = server.metrics()
    charged = 0
    for _ in range(12):
        # a new client (connection) per request, so both workers serve some
        client = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="svc-fast", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )
        charged += chunks[-1].model_extra["svc"]["credits_used"]  # type: ignore[index]
        client.close()
    bad = openai.OpenAI(base_url=server.base_url, api_key="svc_live_nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="svc-fast", messages=[{"role": "user", "content": "x"}])
    after = server.metrics()

    ok = {"route": CHAT, "status": "200", "model": "svc-fast"}
    assert _delta(after, before, "svc_requests_total", **ok) == 12
    denied = {"route": CHAT, "status": "401", "model": ""}
    assert _delta(after, before, "svc_requests_total", **denied) == 1
    assert _delta(after, before, "svc_rejections_total", code="invalid_api_key") == 1
    first_byte = {"route": CHAT, "model": "svc-fast"}
    assert _delta(after, before, "svc_time_to_first_byte_seconds_count", **first_byte) == 12
    duration = {"route": CHAT, "model": "svc-fast"}
    assert _delta(after, before, "svc_request_duration_seconds_count", **duration) == 12
    assert _delta(after, before, "svc_settlements_total", outcome="completed") == 12
    live = {"environment": "live", "model": "svc-fast"}
    settled = _delta(after, before, "svc_credits_total", movement="settled", **live)
    reserved = _delta(after, before, "svc_credits_total", movement="reserved", **live)
    refunded = _delta(after, before, "svc_credits_total", movement="refunded", **live)
    assert settled == charged
    assert reserved == settled + refunded
    assert after[("svc_open_reservations", ())] == 0
    assert after[("svc_open_streams", ())] == 0
    assert ("svc_usage_stream_pending_events", ()) in after


def test_other_routes_are_counted_by_their_template(server: Server) -> None:
    before = server.metrics()
    for _ in range(3):
        response = server.admin("GET", "/accounts/acct_doesnotexist/credits")
        assert response.status_code == 404
    after = server.metrics()
    routes = {dict(labels).get("route") for name, labels in after if name == "svc_requests_total"}
    route = "/admin/v1/accounts/{pid}/credits"
    assert route in routes, routes
    assert _delta(after, before, "svc_requests_total", route=route, status="404", model="") == 3


def test_every_response_carries_a_request_id_and_a_sane_one_is_kept(server: Server) -> None:
    headers = {"authorization": f"Bearer {server.dev_key}"}
    mine = httpx.get(f"{server.base_url}/models", headers={**headers, "x-request-id": "trace-42"})
    assert mine.headers["x-request-id"] == "trace-42"
    odd = httpx.get(f"{server.base_url}/models", headers={**headers, "x-request-id": "a b\tc"})
    assert odd.headers["x-request-id"].startswith("req_")
    error = httpx.post(f"{server.base_url}/chat/completions", content=b"{", headers=headers)
    assert error.status_code == 400
    assert error.headers["x-request-id"].startswith("req_")
    client = openai.OpenAI(base_url=server.base_url, api_key=server.dev_key)
    with client.chat.completions.with_streaming_response.create(
        model="svc-fast", messages=[{"role": "user", "content": "hi"}], stream=True
    ) as response:
        assert response.headers["x-request-id"].startswith("req_")
        response.read()


def test_the_log_is_json_lines_without_secrets(server: Server) -> None:
    entries = server.log_entries()
    assert entries, "the server logged nothing at all"
    assert all({"ts", "level", "logger", "msg"} <= entry.keys() for entry in entries)
    text = (server.data_dir.parent / "server.log").read_text()
    assert server.dev_key not in text
    assert server.admin_token not in text


def test_a_client_leaving_during_the_upload_is_one_info_line(server: Server) -> None:
    """Headers and half the body, then the client closes: expected client behaviour, so one
    INFO line with the request id, no ERROR and no traceback (nothing is charged)."""
    pid = server.new_account(1_000)
    key = server.new_key(pid)
    log_file = server.data_dir.parent / "server.log"
    offset = log_file.stat().st_size
    rid = "upload-drop-" + secrets.token_hex(6)
    body = b'{"model":"svc-fast","messages":[{"role":"user","content":"hi"}]}'
    host, port = server.root_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\n"
            b"host: %s\r\n"
            b"authorization: Bearer %s\r\n"
            b"x-request-id: %s\r\n"
            b"content-type: application/json\r\n"
            b"content-length: %d\r\n\r\n"
            % (host.encode(), key.encode(), rid.encode(), len(body))
            + body[: len(body) // 2]
        )
        time.sleep(0.3)  # the server has read the headers and started on the body
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.2)
        with log_file.open("rb") as log:
            log.seek(offset)
            text = log.read().decode()
        ours = [e for e in map(json.loads, text.splitlines()) if e.get("request_id") == rid]
        if ours:
            break
    entries = [json.loads(line) for line in text.splitlines()]
    assert [(e["level"], e["logger"]) for e in ours] == [("info", "svc.http")], text
    assert "Traceback" not in text
    assert [e for e in entries if e["level"] in ("error", "critical")] == [], text
    assert server.balance(pid) == 1_000
