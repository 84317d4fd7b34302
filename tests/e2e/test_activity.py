"""``GET /v1/activity`` and ``GET /v1/usage?group_by=key|model`` against a real server:
after a concurrent load, the activity rows are the metadata chunks clients saw, one for one,
and the usage groups are exact."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ROOT, Server

pytestmark = pytest.mark.e2e
MSG = [{"role": "user", "content": "hi"}]
MODELS = ("svc-fast", "svc-smart", "svc-code")


def _new_key(server: Server, pid: str, name: str, environment: str = "live") -> tuple[str, str]:
    """(key_id, secret) of a new key of ``pid``."""
    body = {"name": name, "environment": environment, "daily_cap_credits": None}
    created = server.admin("POST", f"/accounts/{pid}/api-keys", body)
    assert created.status_code == 201, created.text
    return created.json()["id"], created.json()["key"]


def _flushed(server: Server) -> None:
    deadline = time.monotonic() + 30
    while server.admin("GET", "/usage-lag").json()["pending_events"]:
        assert time.monotonic() < deadline, "the flushers did not catch up"
        time.sleep(0.2)


def _metadata(body: str) -> tuple[str, dict[str, Any]]:
    """(the stream's id, its svc metadata) from a chat completion stream's text."""
    chunks = [json.loads(e[6:]) for e in body.split("\n\n") if e.startswith("data: {")]
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1
    return ids.pop(), chunks[-1]["svc"]


async def _load(server: Server, keys: list[tuple[str, str]], n: int) -> dict[str, dict[str, Any]]:
    """``n`` streamed chat completions over 30 connections, spread over the keys and
    models; the metadata each client saw (with its key and model) by stream id."""
    seen: dict[str, dict[str, Any]] = {}
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=30)) as client:

        async def one(i: int) -> None:
            key_id, secret = keys[i % len(keys)]
            model = MODELS[i % len(MODELS)]
            r = await client.post(
                f"{server.base_url}/chat/completions",
                json={"model": model, "messages": MSG, "stream": True},
                headers={"authorization": f"Bearer {secret}"},
            )
            assert r.status_code == 200, r.text
            stream_id, meta = _metadata(r.text)
            seen[stream_id] = {**meta, "key_id": key_id, "model": model}

        await asyncio.gather(*(one(i) for i in range(n)))
    return seen


def _all_pages(
    server: Server, secret: str, query: str = "", limit: int = 40
) -> list[dict[str, Any]]:
    """Every row of the activity list, page by page (``after`` = the last id)."""
    headers = {"authorization": f"Bearer {secret}"}
    rows: list[dict[str, Any]] = []
    after = ""
    while True:
        url = f"{server.base_url}/activity?limit={limit}{query}{after}"
        page = httpx.get(url, headers=headers).json()
        assert page["object"] == "list"
        rows += page["data"]
        if page["data"]:
            assert (page["first_id"], page["last_id"]) == (
                page["data"][0]["id"],
                page["data"][-1]["id"],
            )
        if not page["has_more"]:
            return rows
        assert len(page["data"]) == limit
        after = f"&after={page['last_id']}"


def test_activity_rows_are_the_metadata_clients_saw_one_for_one(server: Server) -> None:
    pid = server.new_account(10_000_000)
    keys = [_new_key(server, pid, f"k{i}") for i in range(2)]
    seen = asyncio.run(_load(server, keys, 150))
    _flushed(server)
    rows = _all_pages(server, keys[0][1])
    assert len(rows) == len(seen) == 150
    assert {r["id"] for r in rows} == set(seen)
    for row in rows:
        saw = seen[row["id"]]
        assert row["object"] == "request.activity"
        assert row["credits_used"] == saw["credits_used"]
        assert row["requested_model"] == saw["requested_model"] == saw["model"]
        assert (row["model"], row["key_id"], row["api"]) == (saw["model"], saw["key_id"], "chat")
        assert (row["outcome"], row["usage_source"]) == ("completed", "upstream")
        assert 0 <= row["ttfb_ms"] <= row["duration_ms"]
        assert row["prompt_tokens"] > 0
        assert row["completion_tokens"] > 0
    created = [r["created"] for r in rows]
    assert created == sorted(created, reverse=True)  # newest first

    # one key's, one model's, one day's: each exactly the rows it names
    first_key = keys[0][0]
    by_key = _all_pages(server, keys[1][1], f"&key_id={first_key}")
    assert {r["id"] for r in by_key} == {i for i, s in seen.items() if s["key_id"] == first_key}
    by_model = _all_pages(server, keys[0][1], "&model=svc-code", limit=500)
    assert {r["id"] for r in by_model} == {i for i, s in seen.items() if s["model"] == "svc-code"}
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert len(_all_pages(server, keys[0][1], f"&day={today}", limit=500)) == 150
    assert _all_pages(server, keys[0][1], "&day=2020-01-01") == []

    # usage by key and by model: exact, and the groups sum to the day
    headers = {"authorization": f"Bearer {keys[0][1]}"}
    for group_by, name in (("key", "key_id"), ("model", "model")):
        usage = httpx.get(
            f"{server.base_url}/usage?days=1&group_by={group_by}", headers=headers
        ).json()
        day = usage["daily"][0]
        spent: Counter[str] = Counter()
        for saw in seen.values():
            spent[saw[name]] += saw["credits_used"]
        assert {g[name]: g["credits_spent"] for g in day["groups"]} == spent
        assert sum(g["requests_count"] for g in day["groups"]) == day["requests_count"] == 150
        assert sum(g["total_tokens"] for g in day["groups"]) == day["total_tokens"]


def test_activity_as_csv_parses_and_equals_the_json(server: Server) -> None:
    pid = server.new_account(1_000_000)
    key_id, secret = _new_key(server, pid, "csv")
    headers = {"authorization": f"Bearer {secret}"}
    for body in [
        {"model": "svc-fast", "messages": [{"role": "user", "content": 'a "quoted", line\nbreak'}]},
        {"model": "svc-code", "messages": MSG},
    ]:
        assert httpx.post(
            f"{server.base_url}/chat/completions", json=body, headers=headers
        ).is_success
    r = httpx.post(
        f"{server.base_url}/responses", json={"model": "svc-fast", "input": "hi"}, headers=headers
    )
    assert r.is_success
    _flushed(server)
    as_json = httpx.get(f"{server.base_url}/activity", headers=headers).json()["data"]
    assert [row["api"] for row in as_json] == ["responses", "chat", "chat"]
    assert as_json[0]["id"].startswith("resp_svc_")
    as_csv = httpx.get(f"{server.base_url}/activity?format=csv", headers=headers)
    assert as_csv.status_code == 200
    assert as_csv.headers["content-type"] == "text/csv; charset=utf-8"
    assert 'filename="activity.csv"' in as_csv.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(as_csv.text)))
    expected = [
        {
            **{k: str(v) for k, v in row.items() if k not in ("object", "created")},
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(row["created"])),
        }
        for row in as_json
    ]
    assert rows == expected
    one = httpx.get(f"{server.base_url}/activity?format=csv&limit=1", headers=headers)
    assert len(list(csv.DictReader(io.StringIO(one.text)))) == 1

    # the operator sees the same, over HTTP and from the command line
    admin = server.admin("GET", f"/accounts/{pid}/activity").json()
    assert admin["data"] == as_json
    assert server.admin("GET", f"/accounts/{pid}/activity?environment=test").json()["data"] == []
    done = subprocess.run(
        [sys.executable, "-m", "app", "admin", "activity", pid, "--key-id", key_id, "--csv"],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert list(csv.DictReader(io.StringIO(done.stdout.decode()))) == rows
    done = subprocess.run(
        [sys.executable, "-m", "app", "admin", "activity", pid, "--limit", "2"],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        timeout=60,
        check=True,
    )
    page = json.loads(done.stdout)
    assert (page["data"], page["has_more"]) == (as_json[:2], True)


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=ten", "limit"),
        ("key_id=kid_123", "key_id"),
        ("day=2026-13-01", "day"),
        ("day=yesterday", "day"),
        ("after=chatcmpl-svc-1", "after"),
        ("format=xml", "format"),
        ("format=csv&after=chatcmpl-svc-1", "after"),
    ],
)
def test_bad_activity_parameters_are_a_400_naming_them(
    server: Server, query: str, param: str
) -> None:
    key = server.new_key(server.new_account(0))
    r = httpx.get(f"{server.base_url}/activity?{query}", headers={"authorization": f"Bearer {key}"})
    assert (r.status_code, r.json()["error"]["param"]) == (400, param)


def test_test_keys_see_test_activity_only(server: Server) -> None:
    pid = server.new_account(100_000)
    _, live = _new_key(server, pid, "live")
    _, test = _new_key(server, pid, "test", environment="test")
    for secret in (live, test, test):
        r = httpx.post(
            f"{server.base_url}/chat/completions",
            json={"model": "svc-fast", "messages": MSG},
            headers={"authorization": f"Bearer {secret}"},
        )
        assert r.is_success
    _flushed(server)
    assert len(_all_pages(server, live)) == 1
    assert len(_all_pages(server, test)) == 2
