"""``serve_chat`` when Redis fails after the response has started: a warning, not a crash."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any, cast

import fakeredis
import pytest
import redis.exceptions

from app.chat.catalog import default_catalog
from app.chat.completion import CompletionService
from app.chat.router import UpstreamRouter
from app.core.logs import JsonFormatter, request_id
from app.credits.ledger import RedisLedger
from app.credits.sweeper import Sweeper
from app.http.chat import CHAT_PATH, serve_chat
from app.kv.layout import KeySpace
from app.runtime import Services
from app.upstream.simulated import SimulatedProvider
from tests.conftest import Clock
from tests.rsgi_transport import FakeHeaders, FakeProtocol, FakeScope
from tests.unit.scripts_helpers import account, key

BODY = b'{"model":"svc-fast","messages":[{"role":"user","content":"hi"}]}'


async def test_a_settlement_redis_times_out_is_one_warning_and_the_sweeper_refunds(
    clock: Clock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    redis_client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    ledger = RedisLedger(redis_client, KeySpace("svc", 64), cap_ttl_s=172_800, usage_ttl_s=86_400)
    await account(ledger, "acct_S", purchased=10_000)
    ident = await key(ledger, "acct_S", "kidS00000000")
    service = CompletionService(
        ledger, UpstreamRouter({}, SimulatedProvider()), deadline_s=900, clock=clock
    )

    async def authenticated(_authorization: str | None, _address: str, use: Any) -> Any:
        return await use(ident)

    services = cast(
        Services,
        SimpleNamespace(
            settings=SimpleNamespace(
                max_body_bytes=1 << 20,
                max_messages=2048,
                max_message_chars=1_000_000,
                image_token_bound=4_096,
            ),
            aliases=default_catalog().aliases,
            auth=SimpleNamespace(authenticated=authenticated),
            completions=service,
            trusted_proxies=[],
        ),
    )

    async def settle_timing_out(*_args: Any, **_kwargs: Any) -> Any:
        raise redis.exceptions.TimeoutError("Timeout reading from socket")

    monkeypatch.setattr(ledger, "settle", settle_timing_out)
    protocol = FakeProtocol([BODY])  # the client stays connected
    scope = FakeScope("POST", CHAT_PATH, FakeHeaders([]))
    caplog.set_level(logging.INFO)
    token = request_id.set("req_settle")  # as the Gateway does for every request
    try:
        await serve_chat(services, scope, protocol, "req_settle")  # returns, no raise
        ours = [r for r in caplog.records if r.name == "svc.http"]
        lines = [json.loads(JsonFormatter().format(r)) for r in ours]
    finally:
        request_id.reset(token)

    assert protocol.response.result().status == 200
    sent = list(protocol.stream.chunks)
    assert sent[-1] is None  # the body has ended (its transport was let go) ...
    assert all(b"[DONE]" not in chunk for chunk in sent[:-1] if chunk)  # ... cut short
    assert [(r.levelno, r.exc_info) for r in ours] == [(logging.WARNING, None)]
    line = lines[0]
    assert line["request_id"] == "req_settle"
    assert "TimeoutError" in line["msg"]
    assert "exc" not in line

    # What is settled, and when, is unchanged: the reservation stays open until the sweeper
    # refunds it after its deadline.
    monkeypatch.undo()
    _status, held = await ledger.balance(ident, clock())
    assert held.total < 10_000
    clock.advance(901)
    assert await Sweeper(ledger, interval_s=1, clock=clock).sweep_once() == 1
    _status, refunded = await ledger.balance(ident, clock())
    assert refunded.total == 10_000
    await redis_client.aclose()
