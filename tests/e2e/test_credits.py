"""The credit model end to end: spotlight rewards and both pools under concurrency.
(Reservations of a SIGKILLed worker and streams at SIGTERM: tests/faults.)"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import redis as redis_sync

from app.kv.layout import KeySpace
from app.ops.embedded import redis_url, socket_path
from tests.e2e.conftest import Server
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
