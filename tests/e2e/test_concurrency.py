"""Money invariants under concurrency, through the real server."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from app.apis.chat.request import parse_chat_request
from app.completion.catalog import default_catalog
from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e


BODY = json.dumps(
    {"model": "svc-smart", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
).encode()


def _hold() -> int:
    """What svc holds for BODY: its prompt's bound (the body's bytes and the template's
    tokens) at the input price, plus the output cap at the output price."""
    params = parse_chat_request(BODY, default_catalog().aliases)
    price = params.alias.price
    return -(-(params.prompt_token_bound * price.input + 20 * price.output) // 1000)


async def _one(client: httpx.AsyncClient, url: str, key: str) -> tuple[int, dict[str, object]]:
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    r = await client.post(url, content=BODY, headers=headers)
    if r.status_code != 200:
        return r.status_code, r.json()
    events = [e for e in r.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    return 200, json.loads(events[-2][6:])


async def test_200_concurrent_requests_against_50_affordable(server: Server) -> None:
    # svc-smart, "hi", max_tokens 20: each request costs ceil((4 x 50 + 20 x 150) / 1000) = 4
    # (24 simulated tokens, cut at 20) but holds more: its prompt's bound is the body's bytes
    pid = server.new_account(4 * 50)
    key = server.new_key(pid)
    start = server.balance(pid)
    limits = httpx.Limits(max_connections=200)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        url = f"{server.base_url}/chat/completions"
        results = await asyncio.gather(*(_one(client, url, key) for _ in range(200)))
    ok = [body for status, body in results if status == 200]
    refused = [body for status, body in results if status != 200]
    assert {status for status, _ in results} <= {200, 402}
    # at least what fits when every hold is open at once, at most what the charges allow
    assert 200 // _hold() <= len(ok) <= 50
    for body in refused:
        assert body["error"]["code"] == "insufficient_credits"  # type: ignore[index]
    used = sum(int(body["svc"]["credits_used"]) for body in ok)  # type: ignore[index]
    assert all(int(body["svc"]["credits_used"]) == 4 for body in ok)  # type: ignore[index]
    end = server.balance(pid)
    assert end >= 0
    assert start - end == used == 4 * len(ok)
