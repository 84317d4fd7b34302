"""``GET /v1/usage`` against a real server: totals and today's bucket match what clients saw."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import openai
import pytest

from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e


def _credits_used(response: httpx.Response) -> int:
    events = [e for e in response.text.split("\n\n") if e.startswith("data: {")]
    return int(json.loads(events[-1][6:])["svc"]["credits_used"])


def test_usage_matches_what_clients_were_charged(server: Server) -> None:
    pid = server.new_account(100_000)
    key = server.new_key(pid)
    headers = {"authorization": f"Bearer {key}"}
    charged = 0
    for i in range(4):
        r = httpx.post(
            f"{server.base_url}/chat/completions",
            json={"model": "svc-code", "messages": [{"role": "user", "content": "hi " * i}]},
            headers=headers,
            timeout=30,
        )
        assert r.status_code == 200
        charged += _credits_used(r)

    client = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)
    body = client.get("/usage", cast_to=httpx.Response).json()
    assert set(body) == {"account_pid", "total_tokens", "credits_spent", "requests_count", "daily"}
    assert body["account_pid"] == pid
    assert (body["credits_spent"], body["requests_count"]) == (charged, 4)
    assert body["total_tokens"] > 0
    daily = body["daily"]
    assert len(daily) == 30
    today = datetime.now(UTC).date()
    assert [d["day_bucket"] for d in daily[:2]] == [
        today.isoformat(),
        (today - timedelta(days=1)).isoformat(),
    ]
    assert set(daily[0]) == {"day_bucket", "total_tokens", "credits_spent", "requests_count"}
    assert (daily[0]["credits_spent"], daily[0]["requests_count"]) == (charged, 4)
    assert daily[0]["total_tokens"] == body["total_tokens"]
    assert all(d["requests_count"] == 0 for d in daily[1:])
    assert server.balance(pid) == 100_000 - charged

    week = httpx.get(f"{server.base_url}/usage?days=7", headers=headers).json()
    assert len(week["daily"]) == 7
    assert week["credits_spent"] == charged


@pytest.mark.parametrize("days", ["0", "367", "abc", "-3"])
def test_bad_window_is_a_400_naming_days(server: Server, days: str) -> None:
    pid = server.new_account(10)
    key = server.new_key(pid)
    r = httpx.get(
        f"{server.base_url}/usage?days={days}", headers={"authorization": f"Bearer {key}"}
    )
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "days"
    assert r.json()["error"]["code"] == "invalid_value"


def test_test_keys_see_test_usage_and_live_keys_live_usage(server: Server) -> None:
    pid = server.new_account(1_000)
    live, test = server.new_key(pid), server.new_key(pid, environment="test")
    r = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {test}"},
        timeout=30,
    )
    would_cost = _credits_used(r)
    as_test = httpx.get(f"{server.base_url}/usage", headers={"authorization": f"Bearer {test}"})
    as_live = httpx.get(f"{server.base_url}/usage", headers={"authorization": f"Bearer {live}"})
    assert (as_test.json()["requests_count"], as_test.json()["credits_spent"]) == (1, would_cost)
    assert (as_live.json()["requests_count"], as_live.json()["credits_spent"]) == (0, 0)
    assert server.balance(pid) == 1_000


def test_usage_needs_a_valid_key(server: Server) -> None:
    assert httpx.get(f"{server.base_url}/usage").status_code == 401
    r = httpx.get(f"{server.base_url}/usage", headers={"authorization": "Bearer svc_live_nope"})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
