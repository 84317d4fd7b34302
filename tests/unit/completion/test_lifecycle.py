"""Graceful shutdown: a cut stream ends cleanly and is settled for what was delivered; the
grace period arms on SIGTERM and cuts every open stream when it runs out."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator

import pytest

from app.apis.chat.request import parse_chat_request
from app.completion.catalog import default_catalog
from app.completion.completion import Completion
from app.completion.lifecycle import STREAMS, GracePeriod, OpenStreams
from app.completion.router import UpstreamRouter
from app.completion.service import CompletionService
from app.credits.outcomes import Identity
from app.upstream.base import Piece, UpstreamCall
from app.upstream.simulated import SimulatedProvider
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key


class Stalling:
    """Two tokens, then nothing until cancelled."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        try:
            yield ["a", "b"]
            await asyncio.sleep(3600)
            yield ["never"]
        finally:
            self.closed.set()

    async def close(self) -> None:
        return None


async def _open(ledger: Ledgers, clock: Clock, provider: Stalling) -> tuple[Identity, Completion]:
    await account(ledger, "acct_S", purchased=100_000)
    ident = await key(ledger, "acct_S", "kidS00000000")
    router = UpstreamRouter({"simulated": provider}, SimulatedProvider())  # type: ignore[dict-item]
    service = CompletionService(ledger.holds, router, deadline_s=900, clock=clock)
    body = b'{"model": "svc-smart", "messages": [{"role": "user", "content": "hi"}]}'
    return ident, await service.open(ident, parse_chat_request(body, default_catalog().aliases))


def _events(writes: list[bytes]) -> list[str]:
    return [e for e in b"".join(writes).decode().split("\n\n") if e]


async def _check_cut(ledger: Ledgers, clock: Clock, ident: Identity, writes: list[bytes]) -> None:
    events = _events(writes)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    content = [c["choices"][0]["delta"]["content"] for c in chunks if c.get("choices")]
    assert content == ["a", "b"]  # both tokens read were delivered before the end
    error = chunks[-2]["error"]
    assert (error["type"], error["code"]) == ("server_error", "service_unavailable")
    # prompt 4 x 50 + 2 delivered tokens x 150, per 1,000: one credit
    assert chunks[-1]["svc"]["credits_used"] == 1
    _, balance = await ledger.money.balance(ident, clock())
    assert balance.total == 100_000 - 1 == chunks[-1]["svc"]["balance_remaining"]
    assert await ledger.redis.zcard(ledger.layout.reservations(ident.shard)) == 0
    stream = await ledger.redis.xrange(ledger.layout.events(ident.shard))
    assert [fields[b"outcome"] for _, fields in stream] == [b"shutdown"]


async def test_a_stream_cut_mid_read_ends_cleanly_and_pays_what_was_delivered(
    ledger: Ledgers, clock: Clock
) -> None:
    provider = Stalling()
    ident, completion = await _open(ledger, clock, provider)
    writes: list[bytes] = []
    written = asyncio.Event()

    async def send(data: bytes, more: bool) -> None:
        writes.append(data)
        written.set()

    relay = asyncio.ensure_future(completion.relay(send))
    await asyncio.wait_for(written.wait(), 5)
    assert len(STREAMS) == 1
    await asyncio.sleep(0.05)  # "a" and "b" went out in one write; the relay waits upstream
    completion.cut()
    await relay  # the cut's cancellation was taken back: the relay returns normally
    assert provider.closed.is_set()  # the upstream request was closed
    assert len(STREAMS) == 0
    await _check_cut(ledger, clock, ident, writes)


async def test_a_cut_during_a_write_lets_the_write_finish(ledger: Ledgers, clock: Clock) -> None:
    provider = Stalling()
    ident, completion = await _open(ledger, clock, provider)
    writes: list[bytes] = []
    in_write, release = asyncio.Event(), asyncio.Event()

    async def send(data: bytes, more: bool) -> None:
        if not writes:
            in_write.set()
            await release.wait()  # a slow client: the first write takes a while
        writes.append(data)

    relay = asyncio.ensure_future(completion.relay(send))
    await asyncio.wait_for(in_write.wait(), 5)
    completion.cut()  # not cancelled mid-write: the stream ends after it
    release.set()
    await asyncio.wait_for(relay, 5)
    await _check_cut(ledger, clock, ident, writes)


async def test_a_client_leaving_while_cut_is_a_disconnect(ledger: Ledgers, clock: Clock) -> None:
    provider = Stalling()
    ident, completion = await _open(ledger, clock, provider)
    written = asyncio.Event()

    async def send(data: bytes, more: bool) -> None:
        written.set()

    relay = asyncio.ensure_future(completion.relay(send))
    await asyncio.wait_for(written.wait(), 5)
    await asyncio.sleep(0.01)
    completion.cut()
    relay.cancel()  # the client left too: the cancellation is not taken back
    with pytest.raises(asyncio.CancelledError):
        await relay
    for _ in range(100):  # the abandoned stream's settlement runs in the background
        if not await ledger.redis.zcard(ledger.layout.reservations(ident.shard)):
            break
        await asyncio.sleep(0.01)
    stream = await ledger.redis.xrange(ledger.layout.events(ident.shard))
    assert [fields[b"outcome"] for _, fields in stream] == [b"client_disconnect"]
    _, balance = await ledger.money.balance(ident, clock())
    assert balance.total == 100_000 - 1  # the two tokens delivered


async def test_a_stream_that_registers_after_cutting_began_is_cut_at_once(
    ledger: Ledgers, clock: Clock
) -> None:
    provider = Stalling()
    ident, completion = await _open(ledger, clock, provider)
    writes: list[bytes] = []

    async def send(data: bytes, more: bool) -> None:
        writes.append(data)

    STREAMS.cutting = True
    try:
        await asyncio.wait_for(completion.relay(send), 5)
    finally:
        STREAMS.cutting = False
    await _check_cut(ledger, clock, ident, writes)


class Recorder:
    def __init__(self) -> None:
        self.cuts = 0

    def cut(self) -> None:
        self.cuts += 1


async def test_sigterm_arms_the_grace_period_which_cuts_every_open_stream() -> None:
    streams = OpenStreams()
    open_one, closed_one = Recorder(), Recorder()
    streams.add(open_one)
    streams.add(closed_one)
    streams.discard(closed_one)
    grace = GracePeriod(0.05, streams)
    assert grace.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # pytest's own handler is the default: not called
        for _ in range(100):
            if grace.armed:
                break
            await asyncio.sleep(0.01)
        assert grace.armed
        assert open_one.cuts == 0  # not before the grace period is over
        await asyncio.sleep(0.2)
        assert (open_one.cuts, closed_one.cuts) == (1, 0)
        late = Recorder()
        streams.add(late)
        assert late.cuts == 1
    finally:
        grace.uninstall()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
