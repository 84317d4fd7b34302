"""A verified spotlight callback while Redis is down: 503 (the network retries it), and the
retries after Redis is back reward the view exactly once, with the ledger in step."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from app.spotlights.signed import SIGNATURE_HEADER, sign
from tests.e2e.test_admin_cli import svc_admin
from tests.faults.conftest import Stack, start_stack

pytestmark = [pytest.mark.e2e, pytest.mark.faults]
SECRET = b"outage-verifier-secret"


def _delivery(base_url: str, intent: str) -> tuple[str, bytes, dict[str, str]]:
    body = json.dumps({"intent": intent, "view_id": "view-outage"}).encode()
    headers = {SIGNATURE_HEADER: sign(SECRET, int(time.time()), body)}
    return f"{base_url}/spotlights/verified", body, headers


async def test_a_callback_during_an_outage_is_503_then_rewarded_once(
    tmp_path: Path, stack_factory: list[Stack]
) -> None:
    stack = await asyncio.to_thread(
        start_stack,
        tmp_path,
        env={"SVC_SPOTLIGHT_SECRETS": SECRET.decode(), "SVC_REDIS_TIMEOUT_S": "1"},
    )
    stack_factory.append(stack)
    srv = stack.srv
    pid = await asyncio.to_thread(srv.new_account, 0)
    key = await asyncio.to_thread(srv.new_key, pid)
    auth = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=30) as client:
        issued = await client.post(f"{srv.base_url}/spotlights/intents", headers=auth)
        assert issued.status_code == 201, issued.text
        url, body, headers = _delivery(srv.base_url, issued.json()["token"])
        await asyncio.to_thread(stack.valkey.stop)
        down = await client.post(url, content=body, headers=headers)
        assert (down.status_code, down.json()["error"]["code"]) == (503, "service_unavailable")
        await asyncio.to_thread(stack.valkey.start)
        answers: list[httpx.Response] = []
        deadline = time.monotonic() + 20
        while not answers or answers[-1].status_code == 503:
            assert time.monotonic() < deadline, "Redis never came back for the callback"
            await asyncio.sleep(0.2)
            # the network's retries, several at once as a redelivery can be
            answers += await asyncio.gather(
                *(client.post(url, content=body, headers=headers) for _ in range(10))
            )
        settled = [a.json() for a in answers if a.status_code != 503]
        assert {a.status_code for a in answers} <= {200, 503}
        assert sum(a["rewarded"] for a in settled) == 1, settled
        credits = (await client.get(f"{srv.base_url}/credits", headers=auth)).json()
    assert credits["earned_available"] == 5_000
    code, out = await asyncio.to_thread(svc_admin, srv.env, "reconcile")
    assert code == 0, out
