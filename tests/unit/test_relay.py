"""The relay loop against a scripted provider: what is written, when, and what is charged."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from app.chat.catalog import default_catalog
from app.chat.completion import CompletionService
from app.chat.request import parse_chat_request
from app.chat.router import UpstreamRouter
from app.credits.ledger import RedisLedger
from app.upstream.base import Piece, UpstreamCall, UpstreamError, Usage
from app.upstream.simulated import SimulatedProvider
from tests.conftest import Clock
from tests.unit.scripts_helpers import account, key

Script = list[tuple[float, list[Piece] | Exception]]  # (delay before, batch or failure)


class ScriptedProvider:
    def __init__(self, script: Script) -> None:
        self.script = script

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        for delay, item in self.script:
            await asyncio.sleep(delay)
            if isinstance(item, Exception):
                raise item
            yield item

    async def close(self) -> None:
        return None


async def _relay(ledger: RedisLedger, clock: Clock, script: Script) -> tuple[list[bytes], int]:
    await account(ledger, "acct_R", purchased=100_000)
    ident = await key(ledger, "acct_R", "kidR00000000")
    aliases = default_catalog().aliases
    router = UpstreamRouter({"simulated": ScriptedProvider(script)}, SimulatedProvider())  # type: ignore[dict-item]
    service = CompletionService(ledger, router, deadline_s=900, hold_back_s=0.02, clock=clock)
    body = json.dumps({"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]})
    completion = await service.open(ident, parse_chat_request(body.encode(), aliases))
    writes: list[bytes] = []

    async def send(data: bytes, more: bool) -> None:
        writes.append(data)
        assert more == (data[-14:] != b"data: [DONE]\n\n")

    await completion.relay(send)
    _status, balance = await ledger.balance(ident, clock())
    return writes, balance.total


def _chunks(writes: list[bytes]) -> list[dict[str, object]]:
    events = b"".join(writes).decode().split("\n\n")
    return [json.loads(e[6:]) for e in events if e.startswith("data: {")]


def _finishes(chunks: list[dict[str, object]]) -> list[tuple[str | None, str | None]]:
    return [
        (c["choices"][0]["delta"].get("content"), c["choices"][0]["finish_reason"])  # type: ignore[index]
        for c in chunks
        if c.get("choices")
    ]


async def test_what_arrives_together_is_written_together(ledger: RedisLedger, clock: Clock) -> None:
    writes, _ = await _relay(ledger, clock, [(0, ["a", "b", "c"]), (0, ["d", Usage(4, 4)])])
    # a and b at once (c held for what follows); c with the next read (d held); d and stop
    # together with the metadata
    assert [w.count(b'"content"') for w in writes] == [2, 1, 1]
    assert _finishes(_chunks(writes)) == [("a", None), ("b", None), ("c", None), ("d", "stop")]


async def test_a_token_is_held_back_only_briefly(ledger: RedisLedger, clock: Clock) -> None:
    # the upstream ends 0.1 s after its last token: longer than the 0.02 s hold
    writes, balance = await _relay(ledger, clock, [(0, ["a"]), (0.1, ["b"]), (0.1, [Usage(4, 2)])])
    assert [w.count(b'"content"') for w in writes] == [1, 1, 1]
    chunks = _chunks(writes)
    assert _finishes(chunks) == [("a", None), ("b", None), ("", "stop")]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"  # type: ignore[index]
    assert chunks[-1]["svc"]["credits_used"] == 1  # type: ignore[index]
    assert balance == 100_000 - 1


async def test_an_upstream_failure_after_a_held_token(ledger: RedisLedger, clock: Clock) -> None:
    writes, balance = await _relay(
        ledger, clock, [(0, ["a", "b"]), (0, UpstreamError("stream failed: boom"))]
    )
    chunks = _chunks(writes)
    assert _finishes(chunks) == [("a", None), ("b", None)]
    errors = [c for c in chunks if "error" in c]
    assert len(errors) == 1
    meta = chunks[-1]["svc"]
    assert meta["credits_used"] == 1  # type: ignore[index]
    assert balance == 100_000 - 1


@pytest.mark.parametrize("hold_expires", [False, True])
async def test_cancelling_mid_read_settles_and_closes(
    ledger: RedisLedger, clock: Clock, hold_expires: bool
) -> None:
    await account(ledger, "acct_C", purchased=100_000)
    ident = await key(ledger, "acct_C", "kidC00000000")
    closed = asyncio.Event()

    class Stalling:
        async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
            try:
                yield ["a"]
                await asyncio.sleep(3600)
                yield ["never"]
            finally:
                closed.set()

        async def close(self) -> None:
            return None

    router = UpstreamRouter({"simulated": Stalling()}, SimulatedProvider())  # type: ignore[dict-item]
    service = CompletionService(ledger, router, deadline_s=900, hold_back_s=0.01, clock=clock)
    body = b'{"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}'
    completion = await service.open(ident, parse_chat_request(body, default_catalog().aliases))

    async def send(data: bytes, more: bool) -> None:
        return None

    relay = asyncio.ensure_future(completion.relay(send))
    await asyncio.sleep(0.05 if hold_expires else 0.001)
    relay.cancel()
    with pytest.raises(asyncio.CancelledError):
        await relay
    assert closed.is_set()
    assert await ledger.redis.zcard(ledger.layout.reservations(ident.shard)) == 0
    _, balance = await ledger.balance(ident, clock())
    assert balance.total == 100_000 - 1  # one token delivered or generated: charged once
