"""Upstream faults under concurrent load (tests/e2e/test_upstreams.py covers each one alone):
failover past a 500 and a first byte that never comes, every upstream failing (502), and
streams dropped mid-way, all at once on one account; then the money invariants."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from tests.faults.conftest import Stack, mock_stats, start_stack
from tests.faults.invariants import Account, check_money, load

pytestmark = [pytest.mark.e2e, pytest.mark.faults]
ALIASES = {
    "svc-code": ["code-fail500", "code-stall", "code-slow10"],  # failover to the third
    "svc-smart": ["smart-fail500", "smart-refuse"],  # every upstream fails: 502
    "svc-fast": ["fast-drop5"],  # the connection drops after 5 tokens
}


def _body(model: str) -> dict[str, object]:
    return {"model": model, "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}


async def test_upstream_faults_under_load_conserve_every_credit(
    tmp_path: Path, stack_factory: list[Stack]
) -> None:
    stack = await asyncio.to_thread(start_stack, tmp_path, aliases=ALIASES)
    stack_factory.append(stack)
    srv = stack.srv
    pid = await asyncio.to_thread(srv.new_account, 100_000)
    key = await asyncio.to_thread(srv.new_key, pid)
    code, smart, fast = await asyncio.gather(
        load(srv.base_url, key, _body("svc-code"), total=30, concurrency=10),
        load(srv.base_url, key, _body("svc-smart"), total=30, concurrency=10),
        load(srv.base_url, key, _body("svc-fast"), total=30, concurrency=10),
    )
    for s in code:  # the third upstream served every one, after the 500 and the stall
        assert (s.status, s.done, s.error) == (200, True, None)
        assert len(s.content.split()) == 20
    models = mock_stats(stack.mock)["seen_models"]
    assert models == {  # type: ignore[comparison-overlap]
        "code-fail500": 30,
        "code-stall": 30,
        "code-slow10": 30,
        "smart-fail500": 30,
        "smart-refuse": 30,
        "fast-drop5": 30,
    }
    for s in smart:  # released, nothing charged, and the SDKs are told to retry
        assert s.status == 502
        assert s.error is not None
        assert (s.error["type"], s.error["code"]) == ("upstream_error", "upstream_unavailable")
        assert s.headers["x-should-retry"] == "true"
    for s in fast:  # one error event, then metadata and [DONE]; charged for 5 tokens
        assert (s.status, s.done) == (200, True)
        assert s.error is not None
        assert s.error["code"] == "upstream_unavailable"
        assert len(s.content.split()) == 5
        assert s.credits_used == math.ceil((4 * 5 + 5 * 15) / 1000)
    await asyncio.to_thread(stack.flush)
    acct = Account(pid, 100_000, seen=code + smart + fast)
    totals = await asyncio.to_thread(check_money, stack.redis(), stack.database_url, [acct])
    assert totals["requests"] == 60  # the 502s were released: no usage
    assert totals["decrease"] == totals["reported"]
