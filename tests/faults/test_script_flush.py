"""SCRIPT FLUSH again and again under load: every request still served, nothing lost."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from tests.faults.conftest import Stack, start_stack
from tests.faults.invariants import Account, check_money, load

pytestmark = [pytest.mark.e2e, pytest.mark.faults]


def _flush_scripts(stack: Stack, stop: threading.Event, count: list[int]) -> None:
    r = stack.redis()
    while not stop.wait(0.02):
        r.script_flush()
        count[0] += 1


async def test_script_flush_under_load_is_invisible_to_clients(
    tmp_path: Path, stack_factory: list[Stack]
) -> None:
    stack = await asyncio.to_thread(start_stack, tmp_path, env={"SVC_FLUSH_INTERVAL_S": "0.2"})
    stack_factory.append(stack)
    srv = stack.srv
    pid = await asyncio.to_thread(srv.new_account, 1_000_000)
    key = await asyncio.to_thread(srv.new_key, pid, daily_cap=400)
    kid = key[9:21]
    stop, flushes = threading.Event(), [0]
    flusher = threading.Thread(target=_flush_scripts, args=(stack, stop, flushes))
    flusher.start()
    try:
        body = {
            "model": "svc-fast",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": "x"}],
        }
        seen = await load(srv.base_url, key, body, total=600, concurrency=16)
    finally:
        stop.set()
        flusher.join()
    assert flushes[0] > 20
    # the cap (400 credits, 1 a request) refuses the rest with 429; nothing else goes wrong
    assert {s.status for s in seen} == {200, 429}
    served = [s for s in seen if s.status == 200]
    assert len(served) == 400
    assert all(s.meta is not None and s.done and s.error is None for s in served)
    for s in seen:
        if s.status == 429:
            assert s.error is not None
            # held: refused while requests in flight held the rest of the cap
            assert s.error["code"] in {"daily_cap_exceeded", "daily_cap_held"}
    await asyncio.to_thread(stack.flush)
    acct = Account(pid, 1_000_000, caps={kid: 400}, seen=seen)
    totals = await asyncio.to_thread(check_money, stack.redis(), stack.database_url, [acct])
    assert totals["decrease"] == totals["reported"] == 400
