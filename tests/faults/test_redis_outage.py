"""Redis stopped (SIGTERM) or killed (SIGKILL) under load, then restarted on its AOF."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.faults.conftest import Stack, mock_stats, start_stack
from tests.faults.invariants import Account, Seen, check_money, request, wait_settled

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

BODY = {"model": "svc-fast", "max_tokens": 30, "messages": [{"role": "user", "content": "hi"}]}


class Load:
    """Clients sending requests back to back until stopped; each result with its times."""

    def __init__(self, stack: Stack, key: str, clients: int) -> None:
        self.url = f"{stack.srv.base_url}/chat/completions"
        self.key = key
        self.clients = clients
        self.results: list[tuple[float, float, Seen]] = []
        self.stopping = asyncio.Event()

    async def _client(self, client: httpx.AsyncClient) -> None:
        while not self.stopping.is_set():
            began = time.monotonic()
            seen = await request(client, self.url, self.key, BODY)
            self.results.append((began, time.monotonic(), seen))
            if seen.status != 200:
                await asyncio.sleep(0.05)  # as a client honouring retry-after would, briefly

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            await asyncio.gather(*(self._client(client) for _ in range(self.clients)))

    def between(self, start: float, end: float) -> list[Seen]:
        return [seen for began, ended, seen in self.results if began >= start and ended <= end]


def _mock_requests(stack: Stack) -> int:
    return int(mock_stats(stack.mock)["requests"])  # type: ignore[call-overload]


async def _short_deadline_stack(tmp_path: Path, stack_factory: list[Stack]) -> Stack:
    """A stack whose reservations live 6 s (a heartbeat every 2 s), swept every 0.5 s: the
    holds of streams an outage cut are refunded soon after Redis is back."""
    stack = await asyncio.to_thread(
        start_stack,
        tmp_path,
        idle_timeout_s=1.9,  # under a third of the deadline, or svc refuses to start
        env={
            "SVC_RESERVATION_DEADLINE_S": "6",
            "SVC_SWEEP_INTERVAL_S": "0.5",
            "SVC_REDIS_TIMEOUT_S": "1",
        },
    )
    stack_factory.append(stack)
    return stack


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_redis_outage_fails_closed_and_recovers_without_losing_a_credit(
    tmp_path: Path, stack_factory: list[Stack], how: signal.Signals
) -> None:
    stack = await _short_deadline_stack(tmp_path, stack_factory)
    srv = stack.srv
    pid = await asyncio.to_thread(srv.new_account, 1_000_000)
    key = await asyncio.to_thread(srv.new_key, pid)
    load = Load(stack, key, clients=8)
    running = asyncio.ensure_future(load.run())
    try:
        await asyncio.sleep(1.5)
        await asyncio.to_thread(stack.valkey.stop, how)
        await asyncio.sleep(1.0)  # requests that reserved just before may still connect
        quiet_from, upstream_before = time.monotonic(), _mock_requests(stack)
        await asyncio.sleep(2.0)
        quiet_to, upstream_after = time.monotonic(), _mock_requests(stack)
        await asyncio.to_thread(stack.valkey.start)
        restarted = time.monotonic()
        recovered = None
        while recovered is None and time.monotonic() - restarted < 20:
            await asyncio.sleep(0.1)
            ok = [end for _, end, seen in load.results if end > restarted and seen.meta]
            recovered = min(ok) if ok else None
        assert recovered is not None, "no request served after Redis came back"
        await asyncio.sleep(3.0)
    finally:
        load.stopping.set()
        await running
    # Each worker finds Redis back on its own: the other one within a Redis timeout
    # (SVC_REDIS_TIMEOUT_S, 1 s) of the first success, when a connect it began during the
    # outage gives up. From then on every request must be served in full.
    after_recovery = load.between(recovered + 1.5, time.monotonic())

    assert upstream_after == upstream_before  # nothing reached the upstream meanwhile
    down = load.between(quiet_from, quiet_to)
    assert down, "no request ran during the outage"
    for seen in down:
        assert seen.status == 503, seen
        assert seen.error is not None
        assert (seen.error["type"], seen.error["code"]) == ("server_error", "service_unavailable")
        assert seen.headers["retry-after"] == "1"
    assert after_recovery
    failed = [s for s in after_recovery if not (s.status == 200 and s.meta is not None and s.done)]
    assert not failed, failed

    r = stack.redis()
    await asyncio.to_thread(wait_settled, r)  # streams cut by the outage: swept
    await asyncio.to_thread(stack.flush)
    acct = Account(pid, 1_000_000, seen=[seen for _, _, seen in load.results])
    totals = await asyncio.to_thread(check_money, r, stack.database_url, [acct], uncertain=True)
    assert totals["with_meta"] > 0


async def _sdk_stream(client: openai.AsyncOpenAI, outcome: list[str]) -> None:
    """One long stream read with the official SDK; what it ended with."""
    stream = await client.chat.completions.create(
        model="svc-smart",  # 100 ms a token
        max_tokens=60,
        messages=[{"role": "user", "content": "a long answer"}],
        stream=True,
    )
    try:
        async for _chunk in stream:
            pass
    except openai.APIError as exc:
        outcome.append(f"raised: {exc.message}")
        return
    outcome.append("ended without an error")


async def test_streams_redis_dies_under_end_with_an_error_the_sdk_raises_and_are_refunded(
    tmp_path: Path, stack_factory: list[Stack]
) -> None:
    """Streams in flight when Redis is killed: each ends with an error event and [DONE] (no
    broken connection), is charged nothing, and the sweeper refunds its hold once Redis is
    back."""
    stack = await _short_deadline_stack(tmp_path, stack_factory)
    srv = stack.srv
    pid = await asyncio.to_thread(srv.new_account, 100_000)
    key = await asyncio.to_thread(srv.new_key, pid)
    outcomes: list[str] = []
    async with openai.AsyncOpenAI(base_url=srv.base_url, api_key=key, max_retries=0) as client:
        streams = [asyncio.ensure_future(_sdk_stream(client, outcomes)) for _ in range(6)]
        await asyncio.sleep(1.5)  # every stream reserved and relaying
        await asyncio.to_thread(stack.valkey.stop, signal.SIGKILL)
        await asyncio.wait_for(asyncio.gather(*streams), timeout=30)
    assert len(outcomes) == 6
    assert all("charged at most once" in o for o in outcomes), outcomes

    await asyncio.to_thread(stack.valkey.start)
    r = stack.redis()
    await asyncio.to_thread(wait_settled, r)  # the sweeper refunds every hold, once
    await asyncio.to_thread(stack.flush)
    # accepted, and nobody saw a metadata chunk: swept (counted as requests), charged nothing
    acct = Account(pid, 100_000, seen=[Seen(200) for _ in outcomes])
    totals = await asyncio.to_thread(check_money, r, stack.database_url, [acct], uncertain=True)
    assert (totals["requests"], totals["decrease"]) == (6, 0)
