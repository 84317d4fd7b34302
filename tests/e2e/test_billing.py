"""Billing against a real upstream over HTTP, through a real granian server: a token-dense
prompt is charged what the upstream reports, and a disconnect right after a max_tokens cut
still settles at once."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_upstreams import models_file

pytestmark = pytest.mark.e2e
FUNDS = 10_000_000


@pytest.fixture(scope="module")
def mock() -> Iterator[MockProcess]:
    process = start_in_subprocess(chunks=40)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, mock: MockProcess) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("billing")
    aliases = {
        "svc-code": ["code-dense"],
        "svc-fast": ["fast-ignoremax-slow5-cached80-reason7"],  # OpenAI-style cached_tokens
        "svc-smart": ["smart-cached50-writes30"],  # cache writes reported apart
    }
    path = models_file(tmp / "models.toml", mock.base_url, aliases)
    with path.open("a") as models:  # into svc-smart's table, the last
        models.write("cached_input_price = 10\ncache_write_price = 70\n")
    srv = start_server(
        tmp,
        workers=2,
        extra_env={"SVC_MODELS_FILE": str(path)},
    )
    yield srv
    stop_server(srv.process)


def _open_reservations(srv: Server) -> float:
    return srv.metrics()[("svc_open_reservations", ())]


def test_a_cjk_prompt_is_charged_the_upstream_usage(server: Server) -> None:
    """200,000 '的' with max_tokens 32: the upstream counts 200,006 prompt tokens and svc
    charges them at svc-code's price (it used to hold for chars/4 and charge 1,003)."""
    pid = server.new_account(FUNDS)
    body = {
        "model": "svc-code",
        "messages": [{"role": "user", "content": "的" * 200_000}],
        "max_tokens": 32,
    }
    r = httpx.post(
        f"{server.base_url}/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {server.new_key(pid)}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    meta = json.loads(r.text.split("\n\n")[-3][6:])["svc"]
    expected = -(-(200_006 * 20 + 32 * 60) // 1000)  # 4,003 at 20 in / 60 out per 1,000
    assert meta["credits_used"] == expected
    assert server.balance(pid) == FUNDS - expected


def _formula(usage: openai.types.CompletionUsage, rates: tuple[int, int, int, int]) -> int:
    """docs/api.md's charge, from the usage the client was shown."""
    details = usage.prompt_tokens_details.model_dump() if usage.prompt_tokens_details else {}
    cached = details.get("cached_tokens") or 0
    writes = details.get("cache_write_tokens") or 0
    uncached = usage.prompt_tokens - cached - writes
    units = (
        uncached * rates[0]
        + cached * rates[1]
        + writes * rates[2]
        + usage.completion_tokens * rates[3]
    )
    return max(1, -(-units // 1000))


@pytest.mark.parametrize(
    ("model", "rates"),
    [("svc-fast", (5, 2, 5, 15)), ("svc-smart", (50, 10, 70, 150))],
    ids=["cached", "cache-writes"],
)
def test_a_cached_heavy_conversation_is_charged_by_the_formula(
    server: Server, model: str, rates: tuple[int, int, int, int]
) -> None:
    """A conversation through the OpenAI SDK whose every turn the upstream reports mostly
    cached (svc-fast: 80 % cached, and reasoning tokens;
    svc-smart: 50 % cached and 30 % written to the cache, priced apart): each request costs
    exactly the formula over the usage the client was shown."""
    pid = server.new_account(FUNDS)
    client = openai.OpenAI(base_url=server.base_url, api_key=server.new_key(pid), max_retries=0)
    messages: list[dict[str, str]] = [{"role": "system", "content": "You are terse. " * 400}]
    balance = FUNDS
    for turn in range(4):
        messages.append({"role": "user", "content": f"question {turn}: " + "more " * 300})
        stream = client.chat.completions.create(
            model=model,
            messages=messages,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        text, usage = "", None
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            if chunk.usage is not None:
                usage = chunk.usage
        assert usage is not None
        assert usage.prompt_tokens_details is not None
        assert (usage.prompt_tokens_details.cached_tokens or 0) > 0
        charged = balance - server.balance(pid)
        assert charged == _formula(usage, rates)
        balance -= charged
        messages.append({"role": "assistant", "content": text})


def test_disconnects_right_after_a_max_tokens_cut_are_settled_at_once(server: Server) -> None:
    """Clients that hang up as the cut arrives: every reservation is settled by its own
    request within a second or two (not left for the sweeper), and the balance fell by
    exactly the usage recorded."""
    pid = server.new_account(FUNDS)
    key = server.new_key(pid)
    body = {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

    async def one(client: httpx.AsyncClient, n: int) -> None:
        async with client.stream("POST", "/chat/completions", json=body) as response:
            seen = 0
            async for line in response.aiter_lines():
                if line.startswith("data: {") and '"content"' in line:
                    seen += 1
                    if seen >= 3 + n % 2:  # hang up at the cut, or one chunk before it
                        return

    async def run() -> None:
        auth = {"authorization": f"Bearer {key}"}
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(
            base_url=server.base_url, headers=auth, timeout=30, limits=limits
        ) as client:
            await asyncio.gather(*(one(client, n) for n in range(200)))

    asyncio.run(run())
    deadline = time.monotonic() + 5
    while _open_reservations(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _open_reservations(server) == 0
    usage = httpx.get(
        f"{server.base_url}/usage", headers={"authorization": f"Bearer {key}"}, timeout=30
    ).json()
    assert usage["requests_count"] == 200
    assert server.balance(pid) == FUNDS - usage["credits_spent"]
