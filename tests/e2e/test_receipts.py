"""``GET /v1/activity/{id}`` against a real server whose flushers wait an hour: a request's
receipt is there as its stream ends (read from the usage stream: the activity list is
still empty), equals what its metadata chunk said, and is the same once ``svc admin
flush`` has written its row, which it equals too. Only the owning account, in the key's
environment, sees it; the operator sees it too. A request whose first upstream failed
before its first token and whose second served it says so (``failovers``), before and
after the flush, and a replay of it (its Idempotency-Key) settles nothing and leaves its
receipt as it was. A receipt names the prices its request was charged at, and still does
once svc runs with other prices."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import ROOT, Server, start_server
from tests.e2e.test_upstreams import models_file
from tests.support.processes import stop_process

pytestmark = pytest.mark.e2e
MSG = [{"role": "user", "content": "Say something short."}]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose flushers never run while the tests do (``flush`` writes the rows)."""
    env = {"SVC_FLUSH_INTERVAL_S": "3600"}
    srv = start_server(tmp_path_factory.mktemp("receipts"), workers=2, extra_env=env)
    try:
        yield srv
    finally:
        stop_process(srv.process)


@pytest.fixture(scope="module")
def mock() -> Iterator[MockProcess]:
    process = start_in_subprocess(chunks=5)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def failing_over(tmp_path_factory: pytest.TempPathFactory, mock: MockProcess) -> Iterator[Server]:
    """A server (flushers waiting an hour, as ``site``) whose svc-code is served by the mock
    upstream: first a model that answers 500, then one that answers."""
    tmp = tmp_path_factory.mktemp("failover-receipts")
    path = models_file(
        tmp / "models.toml", mock.base_url, {"svc-code": ["code-fail500", "code-good"]}
    )
    env = {
        "SVC_FLUSH_INTERVAL_S": "3600",
        "SVC_MODELS_FILE": str(path),
        "MOCK_API_KEY": "mock-provider-key",
    }
    srv = start_server(tmp, extra_env=env)
    try:
        yield srv
    finally:
        stop_process(srv.process)


def _h(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _chat(site: Server, key: str, model: str = "svc-auto") -> tuple[str, dict[str, Any]]:
    """A streamed completion with usage; (its id, its metadata chunk's svc and usage)."""
    body = {
        "model": model,
        "messages": MSG,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    r = httpx.post(f"{site.base_url}/chat/completions", json=body, headers=_h(key), timeout=30)
    assert r.status_code == 200, r.text
    chunks = [json.loads(e[6:]) for e in r.text.split("\n\n") if e.startswith("data: {")]
    last = chunks[-1]
    return last["id"], {**last["svc"], "model": last["model"], "usage": last["usage"]}


def _receipt(site: Server, key: str, activity_id: str) -> httpx.Response:
    return httpx.get(f"{site.base_url}/activity/{activity_id}", headers=_h(key), timeout=30)


PRICE_FIELDS = ("input", "cached_input", "cache_write", "output")
"""A receipt's ``prices``, as ``GET /v1/pricing`` names each model's four."""


def _prices(site: Server, key: str, model: str) -> dict[str, int]:
    """``model``'s four prices as ``GET /v1/pricing`` lists them now."""
    listed = httpx.get(f"{site.base_url}/pricing", headers=_h(key), timeout=30).json()
    item = next(p for p in listed["data"] if p["model"] == model)
    return {k: item[k] for k in PRICE_FIELDS}


def _flush(site: Server) -> None:
    subprocess.run(
        [sys.executable, "-m", "app", "admin", "flush"],
        cwd=ROOT,
        env=site.env,
        capture_output=True,
        timeout=60,
        check=True,
    )


def _key(site: Server, pid: str, environment: str = "live") -> tuple[str, str]:
    body = {"name": environment, "environment": environment, "daily_cap_credits": None}
    created = site.admin("POST", f"/accounts/{pid}/api-keys", body)
    assert created.status_code == 201, created.text
    return created.json()["id"], created.json()["key"]


def test_a_receipt_is_there_as_the_stream_ends_and_is_the_activity_row(site: Server) -> None:
    pid = site.new_account(0)
    rewarded = site.admin("POST", f"/accounts/{pid}/spotlights", {"view_id": "receipt-view-1"})
    assert rewarded.is_success, rewarded.text  # 5,000 earned credits
    site.admin("POST", f"/accounts/{pid}/grants", {"credits": 100_000})
    key_id, key = _key(site, pid)
    activity_id, saw = _chat(site, key)
    ended = time.monotonic()
    early = _receipt(site, key, activity_id)
    assert early.status_code == 200, early.text
    assert time.monotonic() - ended < 1.0
    # not flushed yet: the list does not have it, the receipt came from the usage stream
    listed = httpx.get(f"{site.base_url}/activity", headers=_h(key)).json()
    assert listed["data"] == []
    receipt = early.json()
    usage = saw["usage"]
    assert receipt == {
        "id": activity_id,
        "object": "request.receipt",
        "created": receipt["created"],
        "key_id": key_id,
        "environment": "live",
        "api": "chat",
        "requested_model": saw["requested_model"],
        "model": saw["model"],
        "outcome": "completed",
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": usage["completion_tokens"],
        "total_tokens": usage["total_tokens"],
        "cached_tokens": 0,  # the simulated upstream reports none
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "usage_source": "upstream",
        "credits_used": saw["credits_used"],
        "prices": _prices(site, key, saw["model"]),  # unchanged since: the list's
        "earned_credits": saw["credits_used"],  # earned first: it expires
        "purchased_credits": 0,
        "failovers": 0,  # the simulated upstream served it first
        "ttfb_ms": receipt["ttfb_ms"],
        "duration_ms": receipt["duration_ms"],
    }
    assert (saw["requested_model"], saw["model"]) == ("svc-auto", receipt["model"])
    assert 0 <= receipt["ttfb_ms"] <= receipt["duration_ms"]
    assert abs(receipt["created"] - time.time()) < 60

    _flush(site)
    (row,) = httpx.get(f"{site.base_url}/activity", headers=_h(key)).json()["data"]
    assert _receipt(site, key, activity_id).json() == receipt  # now from the store: the same
    assert {k: v for k, v in receipt.items() if k in row and k != "object"} == {
        k: v for k, v in row.items() if k != "object"
    }
    operator = site.admin("GET", f"/accounts/{pid}/activity/{activity_id}")
    _is_receipt_and_upstream(operator.json(), receipt)


def test_only_the_owner_sees_a_receipt_in_its_own_environment(site: Server) -> None:
    pid = site.new_account(100_000)
    _, live = _key(site, pid)
    _, test = _key(site, pid, "test")
    other = site.new_key(site.new_account(100_000))
    live_id, _ = _chat(site, live, "svc-fast")
    test_id, test_saw = _chat(site, test, "svc-fast")
    for flushed in (False, True):
        for key, activity_id in ((other, live_id), (test, live_id), (live, test_id)):
            r = _receipt(site, key, activity_id)
            assert r.status_code == 404, r.text
            assert (r.json()["error"]["type"], r.json()["error"]["code"]) == (
                "not_found_error",
                "activity_not_found",
            )
        for unknown in ("chatcmpl-svc-1", "resp_svc_00", "rsv_nothing", "nonsense"):
            assert _receipt(site, live, unknown).status_code == 404
        shown = _receipt(site, test, test_id).json()
        assert (shown["environment"], shown["credits_used"]) == ("test", test_saw["credits_used"])
        assert (shown["earned_credits"], shown["purchased_credits"]) == (None, None)
        admin = site.admin("GET", f"/accounts/{pid}/activity/{test_id}")
        _is_receipt_and_upstream(admin.json(), shown)
        elsewhere = site.admin("GET", f"/accounts/{site.new_account(0)}/activity/{test_id}")
        assert elsewhere.json()["error"]["code"] == "activity_not_found"
        if not flushed:
            _flush(site)
    missing = site.admin("GET", "/accounts/acct_missing/activity/chatcmpl-svc-1")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "account_not_found")


def test_a_response_has_its_receipt(site: Server) -> None:
    pid = site.new_account(100_000)
    _, key = _key(site, pid)
    body = {"model": "svc-code", "input": "hi", "stream": True}
    r = httpx.post(f"{site.base_url}/responses", json=body, headers=_h(key), timeout=30)
    assert r.status_code == 200, r.text
    completed = next(
        json.loads(line[6:])
        for line in r.text.splitlines()
        if line.startswith("data: {") and '"response.completed"' in line
    )
    response = completed["response"]
    receipt = _receipt(site, key, response["id"]).json()
    assert (receipt["id"], receipt["api"], receipt["model"]) == (
        response["id"],
        "responses",
        "svc-code",
    )
    assert receipt["credits_used"] == response["svc"]["credits_used"]
    assert receipt["purchased_credits"] == receipt["credits_used"]
    assert receipt["prices"] == _prices(site, key, "svc-code")


def _seen(mock: MockProcess) -> dict[str, int]:
    stats = httpx.get(mock.base_url.removesuffix("/v1") + "/_stats", timeout=10).json()
    return dict(stats["seen_models"])


def _failed_over_chat(srv: Server, key: str, idempotency_key: str) -> tuple[str, dict[str, Any]]:
    """A streamed svc-code completion (the mock's 500, then its answer): its id and its
    last chunk's ``svc`` object."""
    body = {"model": "svc-code", "messages": MSG, "stream": True}
    headers = {**_h(key), "idempotency-key": idempotency_key}
    r = httpx.post(f"{srv.base_url}/chat/completions", json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    chunks = [json.loads(e[6:]) for e in r.text.split("\n\n") if e.startswith("data: {")]
    return chunks[-1]["id"], chunks[-1]["svc"]


def test_a_request_that_failed_over_says_so_before_and_after_the_flush(
    failing_over: Server, mock: MockProcess
) -> None:
    pid = failing_over.new_account(100_000)
    _, key = _key(failing_over, pid)
    before = _seen(mock)
    chat_id, svc = _failed_over_chat(failing_over, key, "failover-receipt-1")
    seen = _seen(mock)
    for model in ("code-fail500", "code-good"):
        assert seen[model] == before.get(model, 0) + 1, model  # tried in order, once each
    # the metadata object's fields are the contract's: the count is not one of them
    assert "failovers" not in svc
    body = {"model": "svc-code", "input": "hi", "stream": True}
    r = httpx.post(f"{failing_over.base_url}/responses", json=body, headers=_h(key), timeout=30)
    assert r.status_code == 200, r.text
    response_id = next(
        json.loads(line[6:])["response"]["id"]
        for line in r.text.splitlines()
        if line.startswith("data: {") and '"response.completed"' in line
    )

    early = {i: _receipt(failing_over, key, i) for i in (chat_id, response_id)}
    assert [e.status_code for e in early.values()] == [200, 200], [e.text for e in early.values()]
    receipts = {i: e.json() for i, e in early.items()}
    assert [(r["api"], r["failovers"]) for r in receipts.values()] == [
        ("chat", 1),
        ("responses", 1),
    ]
    assert receipts[chat_id]["credits_used"] == svc["credits_used"]
    listed = httpx.get(f"{failing_over.base_url}/activity", headers=_h(key)).json()
    assert listed["data"] == []  # from the usage stream: not flushed yet

    # sent again with its Idempotency-Key: replayed, not served nor settled again
    seen = _seen(mock)
    again_id, again_svc = _failed_over_chat(failing_over, key, "failover-receipt-1")
    assert (again_id, again_svc) == (chat_id, svc)
    assert _seen(mock) == seen
    assert _receipt(failing_over, key, chat_id).json() == receipts[chat_id]

    _flush(failing_over)
    rows = httpx.get(f"{failing_over.base_url}/activity", headers=_h(key)).json()["data"]
    assert sorted(row["id"] for row in rows) == sorted(receipts)  # one row each: no replay's
    for activity_id, receipt in receipts.items():
        assert _receipt(failing_over, key, activity_id).json() == receipt  # from the store
        operator = failing_over.admin("GET", f"/accounts/{pid}/activity/{activity_id}")
        _is_receipt_and_upstream(operator.json(), receipt)


def _is_receipt_and_upstream(operator: dict[str, Any], receipt: dict[str, Any]) -> None:
    """The operator's view of a request is its receipt and the upstream that served it
    (issue 52: never in the account's own)."""
    assert "upstream" not in receipt
    assert {k: v for k, v in operator.items() if k != "upstream"} == receipt
    assert operator["upstream"]["provider"]


def _priced(path: Path, prices: tuple[int, int, int, int]) -> Path:
    """A models file that prices svc-fast at ``prices`` (input, cached input, cache write,
    output), served as by default (the simulated upstream)."""
    names = ("input_price", "cached_input_price", "cache_write_price", "output_price")
    lines = ["[aliases.svc-fast]", *(f"{n} = {p}" for n, p in zip(names, prices, strict=True))]
    path.write_text("\n".join(lines) + "\n")
    return path


def _charge(usage: dict[str, int], prices: tuple[int, int, int, int]) -> int:
    """docs/api.md's charge of a request the simulated upstream served (no cached tokens)."""
    units = usage["prompt_tokens"] * prices[0] + usage["completion_tokens"] * prices[3]
    return max(1, -(-units // 1000))


def test_a_receipt_keeps_the_prices_it_was_billed_at_when_they_change(tmp_path: Path) -> None:
    """svc-fast priced 7 / 3 / 9 / 21, then (svc restarted with another models file) 11 / 4 /
    13 / 33: the receipts of the requests served before name the old prices, from the store
    and from the usage stream alike, for the account and the operator; a request served after
    names the new ones, and each was charged at the prices its receipt names."""
    before, after = (7, 3, 9, 21), (11, 4, 13, 33)
    models = tmp_path / "models.toml"
    env = {"SVC_FLUSH_INTERVAL_S": "3600", "SVC_MODELS_FILE": str(_priced(models, before))}
    srv = start_server(tmp_path, extra_env=env)
    try:
        pid = srv.new_account(100_000)
        _, key = _key(srv, pid)
        assert _prices(srv, key, "svc-fast") == dict(zip(PRICE_FIELDS, before, strict=True))
        flushed, saw = _chat(srv, key, "svc-fast")
        assert saw["credits_used"] == _charge(saw["usage"], before)
        _flush(srv)
        pending, saw = _chat(srv, key, "svc-fast")  # left in the usage stream
        assert saw["credits_used"] == _charge(saw["usage"], before)
        kept = {i: _receipt(srv, key, i).json() for i in (flushed, pending)}
    finally:
        stop_process(srv.process)
    billed = dict(zip(PRICE_FIELDS, before, strict=True))
    assert [r["prices"] for r in kept.values()] == [billed, billed]

    _priced(models, after)
    srv = start_server(tmp_path, extra_env=env)
    try:
        now = dict(zip(PRICE_FIELDS, after, strict=True))
        assert _prices(srv, key, "svc-fast") == now
        for activity_id, receipt in kept.items():
            assert _receipt(srv, key, activity_id).json() == receipt
            operator = srv.admin("GET", f"/accounts/{pid}/activity/{activity_id}")
            _is_receipt_and_upstream(operator.json(), receipt)
        later, saw = _chat(srv, key, "svc-fast")
        assert saw["credits_used"] == _charge(saw["usage"], after)
        kept[later] = _receipt(srv, key, later).json()
        assert (kept[later]["prices"], kept[later]["credits_used"]) == (now, saw["credits_used"])
        _flush(srv)
        for activity_id, receipt in kept.items():
            assert _receipt(srv, key, activity_id).json() == receipt  # each from the store
    finally:
        stop_process(srv.process)
