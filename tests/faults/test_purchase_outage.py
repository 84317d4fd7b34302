"""A Stripe purchase while Redis is down (issue 45): 503, nothing granted, the ledger entry
durable and pending; then either Stripe's retries (several at once) or the repair
(`svc admin reconcile --repair`, what a crash between the store and Redis also leaves to
it) apply it exactly once, and the late retries answer duplicate."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_admin_cli import svc_admin
from tests.faults.conftest import Stack, start_stack
from tests.support import stripe_signing as stripe

pytestmark = [pytest.mark.e2e, pytest.mark.faults]
SECRET = "whsec_outage_test"


def _signed(body: bytes) -> dict[str, str]:
    return {"stripe-signature": stripe.sign(body, SECRET, int(time.time()))}


async def _stack(tmp_path: Path, stack_factory: list[Stack]) -> Stack:
    env = {"SVC_STRIPE_WEBHOOK_SECRETS": SECRET, "SVC_REDIS_TIMEOUT_S": "1"}
    stack = await asyncio.to_thread(start_stack, tmp_path, env=env)
    stack_factory.append(stack)
    return stack


async def _credits(client: httpx.AsyncClient, stack: Stack, pid: str) -> tuple[int, int]:
    got = await client.get(
        f"{stack.srv.root_url}/admin/v1/accounts/{pid}/credits",
        headers={"authorization": f"Bearer {stack.srv.admin_token}"},
    )
    return got.json()["total_available"], got.json()["debt"]


async def test_a_purchase_during_an_outage_is_503_then_granted_once_by_the_retries(
    tmp_path: Path, stack_factory: list[Stack]
) -> None:
    stack = await _stack(tmp_path, stack_factory)
    srv = stack.srv
    pid = await asyncio.to_thread(srv.new_account, 0)
    body = stripe.checkout_session(account=pid, credits="4000", session_id="cs_outage_1")
    url = f"{srv.base_url}/purchases/stripe"
    async with httpx.AsyncClient(timeout=30) as client:
        await asyncio.to_thread(stack.valkey.stop)
        down = await client.post(url, content=body, headers=_signed(body))
        assert (down.status_code, down.json()["error"]["code"]) == (503, "service_unavailable")
        await asyncio.to_thread(stack.valkey.start)
        answers: list[httpx.Response] = []
        deadline = time.monotonic() + 20
        while not answers or answers[-1].status_code == 503:
            assert time.monotonic() < deadline, "Redis never came back for the event"
            await asyncio.sleep(0.2)
            answers += await asyncio.gather(
                *(client.post(url, content=body, headers=_signed(body)) for _ in range(10))
            )
        results = [a.json()["result"] for a in answers if a.status_code == 200]
        assert {a.status_code for a in answers} <= {200, 503}
        assert results.count("applied") <= 1  # the repair may have been first
        assert await _credits(client, stack, pid) == (4000, 0)
    code, report = await asyncio.to_thread(svc_admin, srv.env, "reconcile")
    assert code == 0, report
    assert report["pending_entries"] == 0


async def test_a_pending_purchase_is_repaired_once_without_a_retry(
    tmp_path: Path, stack_factory: list[Stack]
) -> None:
    stack = await _stack(tmp_path, stack_factory)
    srv = stack.srv
    pid = await asyncio.to_thread(srv.new_account, 0)
    body = stripe.checkout_session(account=pid, credits="2500", session_id="cs_outage_2")
    url = f"{srv.base_url}/purchases/stripe"
    async with httpx.AsyncClient(timeout=30) as client:
        await asyncio.to_thread(stack.valkey.stop)
        down = await client.post(url, content=body, headers=_signed(body))
        assert down.status_code == 503
        await asyncio.to_thread(stack.valkey.start)
        code, report = await asyncio.to_thread(svc_admin, srv.env, "reconcile", "--repair")
        assert code == 0, report
        assert (report["repaired_entries"], report["pending_entries"]) == (1, 0)
        assert await _credits(client, stack, pid) == (2500, 0)
        late = await client.post(url, content=body, headers=_signed(body))
        assert (late.status_code, late.json()["result"]) == (200, "duplicate")
        assert await _credits(client, stack, pid) == (2500, 0)
