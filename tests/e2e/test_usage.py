"""``GET /v1/usage`` against a real server: totals and today's bucket match what clients saw."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import openai
import pytest
import redis as redis_sync

from app.kv.layout import KeySpace
from app.ops.embedded import redis_url, socket_path
from tests.e2e.conftest import ROOT, Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin

pytestmark = pytest.mark.e2e
MSG = [{"role": "user", "content": "hi"}]
KEYS = KeySpace("svc", 64)


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


@pytest.fixture
def lazy_flusher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose own flushers stay idle: the test drives flushing itself."""
    srv = start_server(
        tmp_path_factory.mktemp("flush"),
        workers=2,
        extra_env={
            "SVC_FLUSH_INTERVAL_S": "3600",
            "SVC_FLUSH_BATCH_SIZE": "7",
            "SVC_FLUSH_LEASE_S": "2",
        },
    )
    yield srv
    stop_server(srv.process)


def _durable(server: Server, pid: str) -> tuple[int, int, int]:
    conn = sqlite3.connect(server.data_dir / "svc.db")
    try:
        row = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(requests), 0), COALESCE(SUM(credits), 0) "
            "FROM usage_daily WHERE account_pid = ?",
            (pid,),
        ).fetchone()
    finally:
        conn.close()
    return int(row[0]), int(row[1]), int(row[2])


def test_flushers_killed_at_random_moments_lose_and_double_nothing(
    lazy_flusher: Server,
) -> None:
    srv = lazy_flusher
    pid = srv.new_account(10_000_000)
    keys = [srv.new_key(pid) for _ in range(3)]
    seen: list[int] = []
    done = threading.Event()

    def load() -> None:
        with httpx.Client(timeout=30) as client:
            for i in range(240):
                r = client.post(
                    f"{srv.base_url}/chat/completions",
                    json={"model": ("svc-fast", "svc-code")[i % 2], "messages": MSG},
                    headers={"authorization": f"Bearer {keys[i % 3]}"},
                )
                assert r.status_code == 200
                seen.append(_credits_used(r))
        done.set()

    loader = threading.Thread(target=load)
    loader.start()
    kills = 0
    rng = random.Random(7)
    while not done.is_set() or kills < 12:
        flusher = subprocess.Popen(
            [sys.executable, "-m", "app", "admin", "flush"],
            cwd=ROOT,
            env=srv.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.3, 1.2))  # start-up takes ~0.5 s: kills land all over
        flusher.send_signal(signal.SIGKILL)
        flusher.wait()
        kills += 1
    loader.join(60)
    # drain what is left, once the killed flushers' leases have lapsed
    deadline = time.monotonic() + 30
    while True:
        code, out = svc_admin(srv.env, "flush")
        assert code == 0
        if out["lag"] == {"pending_events": 0, "oldest_event_age_s": 0.0}:
            break
        assert time.monotonic() < deadline, out
        time.sleep(0.5)
    _rows, requests, credits = _durable(srv, pid)
    assert (requests, credits) == (240, sum(seen))
    r = redis_sync.Redis.from_url(redis_url(socket_path(srv.data_dir)))
    total = r.hgetall(KEYS.usage_total(KEYS.shard(pid), pid))
    assert (int(total[b"live:requests"]), int(total[b"live:credits"])) == (240, sum(seen))
    usage = httpx.get(f"{srv.base_url}/usage", headers={"authorization": f"Bearer {keys[0]}"})
    assert (usage.json()["requests_count"], usage.json()["credits_spent"]) == (240, sum(seen))


async def test_usage_during_concurrent_load_equals_what_clients_saw(server: Server) -> None:
    pid = server.new_account(1_000_000)
    key = server.new_key(pid)
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=50)) as client:

        async def one(i: int) -> int:
            r = await client.post(
                f"{server.base_url}/chat/completions",
                json={"model": ("svc-fast", "svc-smart")[i % 2], "messages": MSG},
                headers=headers,
            )
            return _credits_used(r)

        async def usage() -> dict[str, object]:
            r = await client.get(f"{server.base_url}/usage?days=2", headers=headers)
            body: dict[str, object] = r.json()
            return body

        first = await asyncio.gather(*(one(i) for i in range(150)))
        # more load while the flushers run: every answer is exact at its moment
        second_task = asyncio.gather(*(one(i) for i in range(150)))
        mid = await usage()
        second = await second_task
        after = await usage()
    assert sum(first) <= int(mid["credits_spent"]) <= sum(first) + sum(second)  # type: ignore[call-overload]
    assert (after["requests_count"], after["credits_spent"]) == (300, sum(first) + sum(second))


def test_losing_redis_loses_no_flushed_history(tmp_path_factory: pytest.TempPathFactory) -> None:
    srv = start_server(tmp_path_factory.mktemp("lost"), workers=1)
    try:
        pid = srv.new_account(100_000)
        key = srv.new_key(pid)
        headers = {"authorization": f"Bearer {key}"}
        for _ in range(5):
            r = httpx.post(
                f"{srv.base_url}/chat/completions",
                json={"model": "svc-fast", "messages": MSG},
                headers=headers,
                timeout=30,
            )
            assert r.status_code == 200
        before = httpx.get(f"{srv.base_url}/usage?days=3", headers=headers).json()
        deadline = time.monotonic() + 20
        while srv.admin("GET", "/usage-lag").json()["pending_events"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        redis_sync.Redis.from_url(redis_url(socket_path(srv.data_dir))).flushall()
        # the key authenticates through its durable hash; usage comes from the rollups
        after = httpx.get(f"{srv.base_url}/usage?days=3", headers=headers).json()
        assert after == before
        assert after["requests_count"] == 5
    finally:
        stop_server(srv.process)


@pytest.mark.parametrize("group_by", [None, "api"])
def test_usage_as_csv_parses_and_equals_the_json(server: Server, group_by: str | None) -> None:
    pid = server.new_account(100_000)
    key = server.new_key(pid)
    headers = {"authorization": f"Bearer {key}"}
    for path, body in [
        ("/chat/completions", {"model": "svc-fast", "messages": MSG}),
        ("/chat/completions", {"model": "svc-code", "messages": MSG}),
        ("/responses", {"model": "svc-fast", "input": "hi"}),
        ("/messages", {"model": "svc-fast", "max_tokens": 64, "messages": MSG}),
    ]:
        assert httpx.post(f"{server.base_url}{path}", json=body, headers=headers).is_success
    query = "days=3" + (f"&group_by={group_by}" if group_by else "")
    as_json = httpx.get(f"{server.base_url}/usage?{query}", headers=headers).json()
    as_csv = httpx.get(f"{server.base_url}/usage?{query}&format=csv", headers=headers)
    assert as_csv.status_code == 200
    assert as_csv.headers["content-type"] == "text/csv; charset=utf-8"
    assert "attachment" in as_csv.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(as_csv.text)))
    counts = ("requests_count", "total_tokens", "credits_spent")
    if group_by is None:
        expected = [
            {"day": d["day_bucket"], **{c: str(d[c]) for c in counts}} for d in as_json["daily"]
        ]
    else:
        expected = [
            {"day": d["day_bucket"], group_by: g[group_by], **{c: str(g[c]) for c in counts}}
            for d in as_json["daily"]
            for g in d["groups"]
        ]
        assert {r["api"] for r in rows} == {"chat", "responses", "messages"}
    assert rows == expected
    assert len(as_json["daily"]) == 3


def test_a_messages_request_is_told_apart_in_activity_and_its_receipt(server: Server) -> None:
    """A request through the Messages API is `messages` in the activity list and in its
    receipt (by the message's own id), charged what its message_stop said."""
    pid = server.new_account(100_000)
    key = server.new_key(pid)
    headers = {"x-api-key": key}
    body = {"model": "svc-fast", "max_tokens": 64, "messages": MSG}
    r = httpx.post(f"{server.base_url}/messages", json=body, headers=headers)
    events = [json.loads(line[6:]) for line in r.text.split("\n") if line.startswith("data: ")]
    message_id = events[0]["message"]["id"]
    credits = events[-1]["svc"]["credits_used"]
    auth = {"authorization": f"Bearer {key}"}
    receipt = httpx.get(f"{server.base_url}/activity/{message_id}", headers=auth).json()
    assert (receipt["api"], receipt["credits_used"]) == ("messages", credits)
    deadline = time.monotonic() + 30
    while True:  # the flusher writes the row within a second or two
        rows = httpx.get(f"{server.base_url}/activity", headers=auth).json()["data"]
        if rows or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [(row["id"], row["api"]) for row in rows] == [(message_id, "messages")]


def test_an_unknown_format_is_a_400_naming_it(server: Server) -> None:
    key = server.new_key(server.new_account(0))
    r = httpx.get(f"{server.base_url}/usage?format=xml", headers={"authorization": f"Bearer {key}"})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "format")
