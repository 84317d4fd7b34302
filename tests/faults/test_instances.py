"""Two ``svc serve`` instances (two workers each, their own ports and data directories) on one
Valkey — or one Valkey Cluster — and one PostgreSQL, with the load spread over both: the
money rules hold across instances, a key's changes reach the other instance at once, caps,
rate limits and the failed-auth limit hold for both together, the flusher and sweeper leases
are shared, and an instance killed under load leaves every reservation refunded once."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import httpx
import pytest

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.faults.conftest import ALIASES
from tests.faults.fleet import Fleet, running_fleet
from tests.faults.invariants import Account, Seen, request

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

FAILED_AUTH_LIMIT = 5
FAST = {"model": "svc-fast", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
SLOW = {"model": "svc-smart", "max_tokens": 40, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockProcess]:
    mock = start_in_subprocess(chunks=100)
    yield mock
    mock.stop()


@pytest.fixture(scope="module", params=["valkey", "cluster"])
def fleet(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: str,
    upstream: MockProcess,
) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp(f"fleet-{request.param}")
    cluster = request.getfixturevalue("valkey_cluster") if request.param == "cluster" else None
    env = {"SVC_FAILED_AUTH_LIMIT": str(FAILED_AUTH_LIMIT), "SVC_FAILED_AUTH_WINDOW_S": "600"}
    with running_fleet(tmp, postgres_server, upstream, ALIASES, cluster=cluster, env=env) as fleet:
        yield fleet


def _h(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def _spread(fleet: Fleet, key: str, body: dict[str, object], total: int) -> list[Seen]:
    """``total`` requests, 16 at a time, each to the next instance."""
    urls = fleet.urls()
    gate = asyncio.Semaphore(16)
    async with httpx.AsyncClient(timeout=60) as client:

        async def one(url: str) -> Seen:
            async with gate:
                return await request(client, f"{url}/chat/completions", key, body)

        return list(await asyncio.gather(*(one(next(urls)) for _ in range(total))))


async def test_the_money_is_exact_across_instances(fleet: Fleet) -> None:
    pid = fleet.a.new_account(1_000_000)
    keys = [fleet.a.new_key(pid), fleet.b.new_key(pid)]
    seen = [s for key in keys for s in await _spread(fleet, key, FAST, 120)]
    assert all(s.status == 200 and s.meta is not None and s.done for s in seen)
    totals = await asyncio.to_thread(fleet.check, [Account(pid, 1_000_000, seen=seen)])
    # one durable rollup per settled request: no event flushed twice by the two instances
    assert totals["requests"] == len(seen) == 240
    assert totals["decrease"] == totals["reported"] > 0


def test_a_key_revoked_through_one_instance_is_refused_by_the_other(fleet: Fleet) -> None:
    pid = fleet.a.new_account(10_000)
    manager, key = fleet.a.new_key(pid, role="admin"), fleet.a.new_key(pid)
    assert httpx.get(f"{fleet.b.base_url}/models", headers=_h(key)).status_code == 200  # cached
    listed = httpx.get(f"{fleet.a.base_url}/api-keys", headers=_h(manager)).json()["data"]
    key_id = next(k["id"] for k in listed if k["last4"] == key[-4:])
    assert httpx.delete(f"{fleet.a.base_url}/api-keys/{key_id}", headers=_h(manager)).is_success
    for _ in range(4):  # both workers of the other instance, on new connections
        refused = httpx.post(f"{fleet.b.base_url}/chat/completions", json=FAST, headers=_h(key))
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "api_key_revoked"


async def test_a_daily_cap_holds_for_both_instances_together(fleet: Fleet) -> None:
    pid = fleet.a.new_account(1_000_000)
    body = {"name": "capped", "environment": "live", "daily_cap_credits": 30}
    created = fleet.a.admin("POST", f"/accounts/{pid}/api-keys", body).json()
    seen = await _spread(fleet, created["key"], FAST, 80)
    refused = [s for s in seen if s.status == 429]
    assert refused
    # held: refused while requests in flight held the rest of the cap (retryable)
    assert all(
        s.error and s.error["code"] in {"daily_cap_exceeded", "daily_cap_held"} for s in refused
    )
    spent = sum(s.credits_used for s in seen if s.meta is not None)
    assert 0 < spent <= 30
    acct = Account(pid, 1_000_000, caps={created["id"].removeprefix("key_"): 30}, seen=seen)
    totals = await asyncio.to_thread(fleet.check, [acct])
    assert totals["decrease"] == spent


def test_a_rate_limit_holds_for_both_instances_together(fleet: Fleet) -> None:
    pid = fleet.a.new_account(100_000)
    body = {"name": "rpm", "environment": "live", "daily_cap_credits": None, "rate_limit_rpm": 4}
    key = fleet.b.admin("POST", f"/accounts/{pid}/api-keys", body).json()["key"]
    urls = fleet.urls()
    codes = [
        httpx.post(f"{next(urls)}/chat/completions", json=FAST, headers=_h(key)).status_code
        for _ in range(10)
    ]
    assert codes.count(200) == 4
    assert codes.count(429) == 6


def test_the_failed_auth_limit_holds_exactly_for_both_instances(fleet: Fleet) -> None:
    address = "127.0.0.5" if not fleet.cluster else "127.0.0.6"  # each fleet's own client
    urls = fleet.urls()
    codes = []
    for _ in range(12):  # a new connection each: every worker of both instances gets some
        transport = httpx.HTTPTransport(local_address=address)
        with httpx.Client(transport=transport, timeout=30) as client:
            answer = client.get(f"{next(urls)}/models", headers=_h("svc_live_wrong"))
        codes.append(answer.status_code)
    assert codes == [401] * FAILED_AUTH_LIMIT + [429] * (12 - FAILED_AUTH_LIMIT)


async def test_an_instance_killed_under_load_leaves_every_hold_refunded_once(
    fleet: Fleet,
) -> None:
    """Last in the module: it kills instance b (all its processes, SIGKILL)."""
    pid = fleet.a.new_account(1_000_000)
    key = fleet.a.new_key(pid)
    load = asyncio.ensure_future(_spread(fleet, key, SLOW, 32))  # 4 s streams on both
    await asyncio.sleep(1.5)
    os.killpg(fleet.b.process.pid, signal.SIGKILL)
    await asyncio.to_thread(fleet.b.process.wait)
    seen = await load
    survived = [s for s in seen if s.meta is not None]
    cut = [s for s in seen if s.meta is None]
    assert survived  # a's streams finished, settled by a
    assert cut  # b's were cut mid-way: their holds are the sweeper's (a's) to refund
    totals = await asyncio.to_thread(
        fleet.check, [Account(pid, 1_000_000, seen=seen)], uncertain=True
    )
    # b's holds were refunded in full, once: what the account paid is what a reported
    assert totals["decrease"] == totals["reported"]
