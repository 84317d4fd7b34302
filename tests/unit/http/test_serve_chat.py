"""``serve_stream`` on granian's RSGI objects (faked): a Redis failure after the response has
started ends the stream with an error event and [DONE] (a warning, not a crash); a client
that goes away mid-stream is noticed whichever way granian tells it (the disconnect watcher,
or a write that fails), and settled."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import fakeredis
import pytest
import redis.exceptions

from app.apis.chat import CHAT
from app.completion.catalog import default_catalog
from app.completion.router import UpstreamRouter
from app.completion.service import CompletionService
from app.completion.settlement import drain_background
from app.core.logs import JsonFormatter, request_id
from app.core.metrics import METRICS
from app.credits.outcomes import Identity
from app.credits.sweeper import Sweeper
from app.http.rsgi.exchange import RSGIExchange
from app.http.streams import serve_stream
from app.kv.layout import KeySpace
from app.runtime import Services
from app.upstream.simulated import SimulatedProvider
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.rsgi_transport import FakeHeaders, FakeProtocol, FakeScope
from tests.support.scripts_helpers import account, key
from tests.support.upstream_helpers import stream_services

BODY = b'{"model":"svc-fast","messages":[{"role":"user","content":"hi"}]}'
SCOPE = FakeScope("POST", CHAT.path, FakeHeaders([("content-length", str(len(BODY)))]))
CREDITS = 10_000


@dataclass
class Chat:
    ledger: Ledgers
    ident: Identity
    services: Services

    async def total(self, clock: Clock) -> int:
        _status, balance = await self.ledger.money.balance(self.ident, clock())
        return balance.total


@pytest.fixture
async def chat(clock: Clock, request: pytest.FixtureRequest) -> AsyncIterator[Chat]:
    """Services enough for ``serve_stream``; the upstream waits ``param`` ms per token."""
    redis_client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    ledger = Ledgers(redis_client, KeySpace("svc", 64), cap_ttl_s=172_800, usage_ttl_s=86_400)
    await account(ledger, "acct_S", purchased=CREDITS)
    ident = await key(ledger, "acct_S", "kidS00000000")
    upstream = SimulatedProvider(delay_ms=getattr(request, "param", 0))
    service = CompletionService(
        ledger.holds, UpstreamRouter({}, upstream), deadline_s=900, clock=clock
    )
    yield Chat(ledger, ident, stream_services(service, ident, default_catalog().aliases))
    await redis_client.aclose()


def _events(sent: list[bytes | None]) -> list[str]:
    """The data lines of what the stream wrote."""
    body = b"".join(chunk for chunk in sent if chunk).decode()
    return [line[6:] for line in body.split("\n") if line.startswith("data: ")]


async def _serve_logged(
    chat: Chat, protocol: FakeProtocol, caplog: pytest.LogCaptureFixture, rid: str
) -> list[dict[str, Any]]:
    """Serve one request; the log lines svc wrote for it."""
    caplog.set_level(logging.INFO)
    token = request_id.set(rid)  # as the Gateway does for every request
    try:
        # returns, no raise
        await serve_stream(CHAT, chat.services, RSGIExchange(SCOPE, protocol), rid)
        ours = [r for r in caplog.records if r.name.startswith("svc.")]
        assert [(r.levelno, r.exc_info) for r in ours] == [(logging.WARNING, None)]
        return [json.loads(JsonFormatter().format(r)) for r in ours]
    finally:
        request_id.reset(token)


def _ends_unsettled(protocol: FakeProtocol) -> None:
    """An error event the SDK raises, then [DONE]; no metadata chunk (its cost is unknown)."""
    assert protocol.response.result().status == 200
    sent = list(protocol.stream.chunks)
    assert sent[-1] is None  # the body has ended
    *_, error, done = _events(sent)
    assert done == "[DONE]"
    assert json.loads(error)["error"]["code"] == "service_unavailable"
    assert all('"svc"' not in event for event in _events(sent))


async def test_a_settlement_redis_times_out_ends_the_stream_with_an_error_and_is_swept(
    chat: Chat, clock: Clock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def settle_timing_out(*_args: Any, **_kwargs: Any) -> Any:
        raise redis.exceptions.TimeoutError("Timeout reading from socket")

    monkeypatch.setattr(chat.ledger.holds, "settle", settle_timing_out)
    protocol = FakeProtocol([BODY])  # the client stays connected
    (line,) = await _serve_logged(chat, protocol, caplog, "req_settle")
    _ends_unsettled(protocol)
    assert line["request_id"] == "req_settle"
    assert "TimeoutError" in line["msg"]
    assert "exc" not in line

    # What is settled, and when, is unchanged: the reservation stays open until the sweeper
    # refunds it after its deadline.
    monkeypatch.undo()
    assert await chat.total(clock) < CREDITS
    clock.advance(901)
    assert await Sweeper(chat.ledger.holds, interval_s=1, clock=clock).sweep_once() == 1
    assert await chat.total(clock) == CREDITS


@pytest.mark.parametrize("chat", [5], indirect=True)  # 24 tokens, 5 ms apart
async def test_a_heartbeat_redis_fails_ends_the_stream_unsettled_and_is_swept(
    chat: Chat, clock: Clock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    chat.services.completions.deadline_s = 0.03  # a heartbeat every 10 ms
    settles: list[object] = []

    async def extend_failing(*_args: Any, **_kwargs: Any) -> Any:
        raise redis.exceptions.ConnectionError("Connection refused")

    async def settle_counted(*args: Any, **kwargs: Any) -> Any:
        settles.append(args)
        raise AssertionError("no settlement is tried once the hold could not be kept")

    monkeypatch.setattr(chat.ledger.holds, "extend", extend_failing)
    monkeypatch.setattr(chat.ledger.holds, "settle", settle_counted)
    protocol = FakeProtocol([BODY])
    (line,) = await _serve_logged(chat, protocol, caplog, "req_beat")
    _ends_unsettled(protocol)
    assert "ConnectionError" in line["msg"]
    assert settles == []
    assert any('"content"' in event for event in _events(list(protocol.stream.chunks)))
    monkeypatch.undo()
    clock.advance(901)
    assert await Sweeper(chat.ledger.holds, interval_s=1, clock=clock).sweep_once() == 1
    assert await chat.total(clock) == CREDITS


def open_streams_now() -> float | None:
    assert METRICS.registry is not None, "unit tests run without a shared metrics directory"
    return METRICS.registry.get_sample_value("svc_open_streams")


@pytest.mark.parametrize("chat", [20], indirect=True)  # 24 tokens, 20 ms apart
@pytest.mark.parametrize(
    "writes_notice", [True, False], ids=["a-write-fails", "writes-still-succeed"]
)
async def test_a_client_gone_mid_stream_ends_the_relay_and_pays_what_was_generated(
    chat: Chat, clock: Clock, writes_notice: bool
) -> None:
    protocol = FakeProtocol([BODY], writes_notice_disconnect=writes_notice)
    open_streams = open_streams_now()
    served = asyncio.create_task(
        serve_stream(CHAT, chat.services, RSGIExchange(SCOPE, protocol), "req_gone")
    )
    await asyncio.wait_for(protocol.stream.arrived.wait(), 5)  # the first chunk is out
    assert CREDITS - await chat.total(clock) > 10  # the output cap is held meanwhile
    protocol.disconnect()
    await asyncio.wait_for(served, 1)  # long before the reply's ~0.5 s
    await drain_background()

    assert protocol.stream.chunks[-1] is None  # the body ended
    assert not any(b"[DONE]" in c for c in protocol.stream.chunks if c)
    assert 1 <= CREDITS - await chat.total(clock) <= 2  # a few tokens' worth, settled
    reservations = chat.ledger.layout.reservations(chat.ident.shard)
    assert await chat.ledger.redis.zcard(reservations) == 0
    assert open_streams_now() == open_streams


async def test_a_client_gone_before_the_whole_body_is_no_error(
    chat: Chat, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    protocol = FakeProtocol()

    async def half_a_body() -> AsyncIterator[bytes]:
        yield BODY[:10]
        protocol.disconnect()  # granian just ends the body early
        yield BODY[10:]

    protocol._body = half_a_body()
    caplog.set_level(logging.INFO)
    await serve_stream(CHAT, chat.services, RSGIExchange(SCOPE, protocol), "req_half")
    assert not protocol.response.done()  # nobody to answer (granian: an empty 500)
    assert [r.getMessage() for r in caplog.records if r.name == "svc.http"] == [
        "client disconnected before sending the whole request body"
    ]
    assert await chat.total(clock) == CREDITS  # nothing reserved
