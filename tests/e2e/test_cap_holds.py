"""Issue 44, item 4, through a real server: a capped key's concurrent requests that find its
cap taken by holds of requests still running are told to retry in seconds (429
``daily_cap_held``, ``x-should-retry: true``), each in its API's own shape, never to stop
until midnight while the settled spend is below the cap."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.core.errors import CAP_HELD_RETRY_AFTER_S
from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.e2e

MESSAGE = [{"role": "user", "content": "hi"}]
# (path, body, headers) of a request of each API; none but Messages (which requires it) sets
# max_tokens, so svc holds a share of what the cap has left
ROUTES = {
    "chat": ("/chat/completions", {"model": "svc-fast", "messages": MESSAGE}),
    "responses": ("/responses", {"model": "svc-fast", "input": "hi"}),
    "messages": ("/messages", {"model": "svc-fast", "max_tokens": 64, "messages": MESSAGE}),
}


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Replies of 24 tokens 20 ms apart: 40 requests sent at once are all in flight."""
    tmp: Path = tmp_path_factory.mktemp("svc-cap-holds")
    srv = start_server(tmp, workers=1, extra_env={"SVC_SIM_DELAY_MS": "20"})
    try:
        yield srv
    finally:
        stop_server(srv.process)


async def _send(client: httpx.AsyncClient, server: Server, key: str, api: str) -> httpx.Response:
    path, body = ROUTES[api]
    headers = {"x-api-key": key} if api == "messages" else {"authorization": f"Bearer {key}"}
    return await client.post(f"{server.base_url}{path}", json=body, headers=headers)


async def test_40_concurrent_requests_on_a_cap_of_100_are_never_told_to_stop_for_the_day(
    slow_server: Server,
) -> None:
    server = slow_server
    pid = server.new_account(1_000_000)
    capped = server.new_key(pid, daily_cap=100)
    apis = [list(ROUTES)[n % 3] for n in range(40)]
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64)) as client:
        answers = await asyncio.gather(*(_send(client, server, capped, api) for api in apis))
        refused = [(api, r) for api, r in zip(apis, answers, strict=True) if r.status_code != 200]
        served = len(answers) - len(refused)
        assert refused, "the 40 requests never filled the cap: nothing tested"
        assert served >= 15
        for api, r in refused:
            assert r.status_code == 429, (api, r.text)
            assert r.headers["x-should-retry"] == "true"
            assert r.headers["retry-after"] == str(CAP_HELD_RETRY_AFTER_S)
            body = r.json()
            if api == "messages":  # Anthropic's shape
                assert body["type"] == "error"
                assert body["error"]["type"] == "rate_limit_error"
                assert "daily credit cap" in body["error"]["message"]
            else:  # OpenAI's, chat and Responses alike
                assert body["error"]["type"] == "rate_limit_error"
                assert body["error"]["code"] == "daily_cap_held"
        # every hold has settled at a credit or two: the cap is far from spent, and the
        # next request of each API is served
        for api in ROUTES:
            again = await _send(client, server, capped, api)
            assert again.status_code == 200, (api, again.text)
