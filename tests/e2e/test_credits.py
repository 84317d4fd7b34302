"""The credit model end to end: spotlight rewards, both pools under concurrency, and
reservations that never leak (SIGKILLed worker, SIGTERM)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import psutil
import pytest
import redis as redis_sync

from app.embedded import redis_url, socket_path
from app.redis_keys import KeySpace
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin

pytestmark = pytest.mark.e2e
KEYS = KeySpace("svc", 64)


def _redis(server: Server) -> redis_sync.Redis:
    return redis_sync.Redis.from_url(redis_url(socket_path(server.data_dir)))


def _pools(server: Server, pid: str) -> tuple[int, int]:
    earned, purchased = _redis(server).hmget(
        KEYS.account(KEYS.shard(pid), pid), ["earned", "purchased"]
    )
    return int(earned or 0), int(purchased or 0)


def _open_reservations(server: Server) -> int:
    r = _redis(server)
    return sum(int(r.zcard(KEYS.reservations(shard))) for shard in range(KEYS.shards))


def _meta(text: str) -> dict[str, int]:
    events = [e for e in text.split("\n\n") if e.startswith("data: {")]
    svc: dict[str, int] = json.loads(events[-1][6:])["svc"]
    return svc


def test_spotlight_rewards_over_http_and_the_cli(server: Server) -> None:
    pid = server.new_account(0)
    r = server.admin("POST", f"/accounts/{pid}/spotlights", {"view_id": "view-a"})
    assert r.status_code == 200
    reward = r.json()
    assert set(reward) == {
        "object",
        "account_pid",
        "view_id",
        "credits",
        "granted_at",
        "earned_expires_at",
    }
    assert (reward["object"], reward["credits"], reward["view_id"]) == (
        "spotlight_reward",
        5000,
        "view-a",
    )
    again = server.admin("POST", f"/accounts/{pid}/spotlights", {"view_id": "view-a"})
    assert again.json() == reward  # idempotent by view_id

    code, out = svc_admin(server.env, "spotlight", pid, "view-b")
    assert code == 0
    assert out["credits"] == 5000

    key = server.new_key(pid)
    credits = httpx.get(f"{server.base_url}/credits", headers={"authorization": f"Bearer {key}"})
    body = credits.json()
    assert (body["earned_available"], body["purchased_available"]) == (10_000, 0)
    assert body["total_available"] == 10_000
    expires = datetime.strptime(body["earned_expires_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(expires - (datetime.now(UTC) + timedelta(days=30))) < timedelta(minutes=2)

    for view in ("c", "d", "e"):
        assert server.admin("POST", f"/accounts/{pid}/spotlights", {"view_id": view}).is_success
    sixth = server.admin("POST", f"/accounts/{pid}/spotlights", {"view_id": "f"})
    assert sixth.status_code == 429
    assert sixth.json()["error"]["code"] == "spotlight_limit_reached"
    assert sixth.json()["error"]["type"] == "rate_limit_error"
    assert int(sixth.headers["retry-after"]) > 0
    assert _pools(server, pid) == (25_000, 0)
    bad = server.admin("POST", f"/accounts/{pid}/spotlights", {"view": "x"})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "view_id"
    missing = server.admin("POST", "/accounts/acct_nobody/spotlights", {"view_id": "x"})
    assert missing.status_code == 404


async def test_500_concurrent_requests_across_both_pools_conserve_every_credit(
    server: Server,
) -> None:
    pid = server.new_account(5_000)
    assert server.admin("POST", f"/accounts/{pid}/spotlights", {"view_id": "v1"}).is_success
    key = server.new_key(pid)
    assert _pools(server, pid) == (5_000, 5_000)
    prompt = "tell me everything " * 105  # ~2,000 characters: about 29 credits a request
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=100)) as client:

        async def one() -> httpx.Response:
            return await client.post(
                f"{server.base_url}/chat/completions",
                json={"model": "svc-smart", "messages": [{"role": "user", "content": prompt}]},
                headers={"authorization": f"Bearer {key}"},
            )

        results = await asyncio.gather(*(one() for _ in range(500)))
    ok = [r for r in results if r.status_code == 200]
    refused = [r for r in results if r.status_code == 402]
    assert len(ok) + len(refused) == 500
    assert ok
    assert refused  # the balance covered only part of them
    for r in refused:
        assert r.json()["error"]["code"] == "insufficient_credits"
        assert r.headers["x-should-retry"] == "false"
    used = sum(_meta(r.text)["credits_used"] for r in ok)
    earned, purchased = _pools(server, pid)
    assert earned >= 0
    assert purchased >= 0
    assert 10_000 - (earned + purchased) == used  # conserved to the credit
    assert earned == 0  # earned credits were spent first
    assert _open_reservations(server) == 0


@pytest.fixture
def dying_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("dying"),
        workers=2,
        extra_env={
            "SVC_SIM_DELAY_MS": "100",
            "SVC_SIM_REPLY_TOKENS": "300",
            "SVC_RESERVATION_DEADLINE_S": "3",
            "SVC_SWEEP_INTERVAL_S": "0.5",
            "SVC_FLUSH_INTERVAL_S": "3600",  # keep the usage events in the stream to read
        },
    )
    yield srv
    stop_server(srv.process)


def test_a_killed_worker_s_reservations_are_refunded_after_the_deadline(
    dying_server: Server,
) -> None:
    srv = dying_server
    pid = srv.new_account(1_000_000)
    key = srv.new_key(pid)
    start = srv.balance(pid)
    started = threading.Barrier(21)
    stop = threading.Event()

    def stream() -> None:
        try:
            with httpx.stream(
                "POST",
                f"{srv.base_url}/chat/completions",
                json={"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]},
                headers={"authorization": f"Bearer {key}"},
                timeout=60,
            ) as r:
                lines = r.iter_lines()
                next(lines)
                started.wait(30)
                for _ in lines:
                    if stop.is_set():
                        return  # the client goes away: its worker settles
        except httpx.HTTPError:
            return  # its worker was killed

    threads = [threading.Thread(target=stream) for _ in range(20)]
    for t in threads:
        t.start()
    started.wait(30)
    assert _open_reservations(srv) == 20
    workers = [p for p in psutil.Process(srv.process.pid).children() if "valkey" not in p.name()]
    assert len(workers) == 2
    victim = workers[0]
    os.kill(victim.pid, signal.SIGKILL)
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(30)
    deadline = time.monotonic() + 15
    while _open_reservations(srv) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _open_reservations(srv) == 0  # swept after the 3 s deadline
    usage = _redis(srv).hget(KEYS.usage_total(KEYS.shard(pid), pid), "live:credits")
    settled = int(usage or 0)
    assert start - srv.balance(pid) == settled  # start - Σ settled, nothing held
    events = _redis(srv).xrange(KEYS.events(KEYS.shard(pid)))
    outcomes = [e[1][b"outcome"] for e in events if e[1][b"acct"] == pid.encode()]
    assert len(outcomes) == 20  # every request settled exactly once
    assert outcomes.count(b"swept") >= 1
    assert set(outcomes) <= {b"swept", b"client_disconnect"}
    # the killed worker was replaced: the server still serves
    again = httpx.post(
        f"{srv.base_url}/chat/completions",
        json={
            "model": "svc-fast",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
        },
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert again.status_code == 200


def test_sigterm_lets_streams_finish_and_settle(tmp_path_factory: pytest.TempPathFactory) -> None:
    srv = start_server(
        tmp_path_factory.mktemp("term"),
        workers=2,
        extra_env={"SVC_SIM_DELAY_MS": "50", "SVC_SIM_REPLY_TOKENS": "30"},
    )
    try:
        pid = srv.new_account(100_000)
        key = srv.new_key(pid)
        results: list[tuple[int, dict[str, int]]] = []
        begun = threading.Barrier(5)

        def stream() -> None:
            with httpx.stream(
                "POST",
                f"{srv.base_url}/chat/completions",
                json={"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]},
                headers={"authorization": f"Bearer {key}"},
                timeout=30,
            ) as r:
                lines = r.iter_lines()
                next(lines)
                begun.wait(30)
                text = "\n".join(lines)
            results.append((r.status_code, _meta(text + "\n\n")))

        threads = [threading.Thread(target=stream) for _ in range(4)]
        for t in threads:
            t.start()
        begun.wait(30)
        srv.process.send_signal(signal.SIGTERM)  # mid-stream: every stream has 1.5 s to go
        assert srv.process.wait(60) == 0
        for t in threads:
            t.join(30)
        assert len(results) == 4
        assert all(status == 200 for status, _ in results)
        used = sum(meta["credits_used"] for _, meta in results)
    finally:
        stop_server(srv.process)
    # restart on the same data: every stream was settled before the exit
    again = start_server(srv.data_dir.parent, workers=1)
    try:
        assert again.balance(pid) == 100_000 - used
        assert _open_reservations(again) == 0
    finally:
        stop_server(again.process)
