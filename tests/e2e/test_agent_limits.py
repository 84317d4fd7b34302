"""What coding agents' defaults meet, through a real server: an output limit above the
alias's is served at the alias's (``svc-max-tokens-clamped``) and charged within it, on the
three streaming APIs; a daily cap reached is a 429 with no ``retry-after`` (which agents
sleep on for hours) and its reset time in ``svc-cap-resets-at`` and the message."""

from __future__ import annotations

import asyncio
import json
import math
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import openai
import pytest

from app.completion.catalog import DEFAULT_ALIASES
from app.completion.request import CLAMPED_HEADER
from app.core.clock import DAY_S, parse_iso_utc
from app.keys.refusals import CAP_RESETS_HEADER
from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e

FAST = DEFAULT_ALIASES["svc-fast"]
LIMIT = FAST.max_output_tokens
# enough for svc-fast's whole output limit and a short prompt, far from 999,999 tokens'
FUNDS = math.ceil(LIMIT * FAST.price.output / 1000) + 20
HI = [{"role": "user", "content": "Say hello."}]
BODIES = {
    "/chat/completions": {"model": "svc-fast", "messages": HI, "max_tokens": 999_999},
    "/responses": {"model": "svc-fast", "input": "Say hello.", "max_output_tokens": 999_999},
    "/messages": {"model": "svc-fast", "messages": HI, "max_tokens": 999_999},
}


def _credits_used(path: str, text: str) -> int:
    """The ``svc`` object's ``credits_used`` of a stream, whichever API wrote it."""
    datas = [line[6:] for line in text.splitlines() if line.startswith("data: {")]
    last: dict[str, Any] = json.loads(datas[-1])
    if path == "/responses":
        last = last["response"]
    return int(last["svc"]["credits_used"])


@pytest.mark.parametrize("path", list(BODIES))
def test_an_output_limit_above_the_alias_is_served_at_it_and_charged_within_it(
    server: Server, path: str
) -> None:
    pid = server.new_account(FUNDS)
    key = server.new_key(pid)
    r = httpx.post(
        server.base_url + path,
        json=BODIES[path],
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert r.headers[CLAMPED_HEADER] == str(LIMIT)
    used = _credits_used(path, r.text)
    assert 1 <= used <= FUNDS
    assert server.balance(pid) == FUNDS - used


def test_the_openai_sdk_streams_a_lowered_limit_and_reads_the_header(server: Server) -> None:
    pid = server.new_account(FUNDS)
    client = openai.OpenAI(base_url=server.base_url, api_key=server.new_key(pid), max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="svc-fast", messages=HI, max_completion_tokens=999_999, stream=True
    )
    assert raw.headers[CLAMPED_HEADER] == str(LIMIT)
    chunks = list(raw.parse())
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    used = chunks[-1].model_extra["svc"]["credits_used"]  # type: ignore[index]
    assert server.balance(pid) == FUNDS - used
    # within the limit: no header
    raw = client.responses.with_raw_response.create(
        model="svc-fast", input="Say hello.", max_output_tokens=LIMIT, stream=True
    )
    assert CLAMPED_HEADER not in raw.headers
    events = list(raw.parse())
    assert events[-1].response.max_output_tokens == LIMIT


@pytest.mark.parametrize("path", list(BODIES))
def test_a_reached_daily_cap_has_no_retry_after_and_says_when_it_resets(
    server: Server, path: str
) -> None:
    pid = server.new_account(1_000)
    key = server.new_key(pid, daily_cap=0)
    r = httpx.post(
        server.base_url + path,
        json=BODIES[path],
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    now = time.time()
    assert r.status_code == 429, r.text
    assert "retry-after" not in r.headers
    assert r.headers["x-should-retry"] == "false"
    resets = r.headers[CAP_RESETS_HEADER]
    midnight = parse_iso_utc(resets)
    assert midnight is not None
    assert midnight % DAY_S == 0
    assert 0 < midnight - now <= DAY_S + 5
    assert datetime.fromtimestamp(midnight, UTC).isoformat().replace("+00:00", "Z") == resets
    error = r.json()["error"]
    assert resets in error["message"]
    if path == "/messages":
        assert error["type"] == "rate_limit_error"  # Anthropic's shape
    else:
        assert error["code"] == "daily_cap_exceeded"
    assert server.balance(pid) == 1_000


def test_the_openai_sdk_gives_up_on_a_reached_cap_at_once(server: Server) -> None:
    """x-should-retry: false, and no retry-after to sleep on: one request, no wait."""
    pid = server.new_account(1_000)
    client = openai.OpenAI(base_url=server.base_url, api_key=server.new_key(pid, daily_cap=0))
    started = time.monotonic()
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="svc-fast", messages=HI, stream=True)
    assert time.monotonic() - started < 5
    assert info.value.code == "daily_cap_exceeded"
    assert CAP_RESETS_HEADER in info.value.response.headers


async def test_concurrent_lowered_limits_hold_in_full_and_never_overdraw(server: Server) -> None:
    """Funds for three holds of the whole limit, eight requests at once asking for more: each
    is held at the alias's limit or refused 402, never held at less, and what the served ones
    were charged is what left the balance."""
    funds = 3 * FUNDS
    pid = server.new_account(funds)
    key = server.new_key(pid)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        answers = await asyncio.gather(
            *(
                client.post(
                    "/chat/completions",
                    json=BODIES["/chat/completions"],
                    headers={"authorization": f"Bearer {key}"},
                )
                for _ in range(8)
            )
        )
    served = [r for r in answers if r.status_code == 200]
    refused = [r for r in answers if r.status_code != 200]
    assert len(served) >= 3  # more when a served one settled before another reserved
    assert all(r.headers[CLAMPED_HEADER] == str(LIMIT) for r in served)
    assert {r.json()["error"]["code"] for r in refused} <= {"insufficient_credits"}
    used = sum(_credits_used("/chat/completions", r.text) for r in served)
    assert server.balance(pid) == funds - used >= 0
