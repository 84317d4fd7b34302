"""``SVC_NON_STREAMING=refuse`` (issue 44, item 14): a chat, Responses or Messages request
whose ``stream`` is not ``true`` (left out, false, null) is the 400 ``stream_required``
naming ``stream``, each API in its own error shape, before anything is reserved; a streamed
request is served as before; and at the default (``stream``) the same request is streamed
anyway, as the contract says."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest

from app.apis.chat import CHAT
from app.apis.dialect import Dialect
from app.apis.messages import MESSAGES
from app.apis.responses import RESPONSES
from app.completion.catalog import default_catalog
from app.completion.router import UpstreamRouter
from app.completion.service import CompletionService
from app.core.settings import Settings
from app.http.rsgi.exchange import RSGIExchange
from app.http.streams import serve_stream
from app.kv.layout import KeySpace
from app.upstream.simulated import SimulatedProvider
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.rsgi_transport import FakeHeaders, FakeProtocol, FakeScope
from tests.support.scripts_helpers import account, key, snapshot
from tests.support.upstream_helpers import stream_services

MSG = [{"role": "user", "content": "hi"}]
BODIES: dict[Dialect, dict[str, Any]] = {
    CHAT: {"model": "svc-fast", "messages": MSG},
    RESPONSES: {"model": "svc-fast", "input": "hi"},
    MESSAGES: {"model": "svc-fast", "messages": MSG, "max_tokens": 16},
}
APIS = pytest.mark.parametrize("api", list(BODIES), ids=lambda api: api.path)


@pytest.fixture
async def ledger_() -> AsyncIterator[Ledgers]:
    """A ledger with the account the requests are made for."""
    redis_client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    ledger = Ledgers(redis_client, KeySpace("svc", 64), cap_ttl_s=172_800, usage_ttl_s=86_400)
    await account(ledger, "acct_N", purchased=10_000)
    yield ledger
    await redis_client.aclose()


async def _serve(
    ledger: Ledgers, clock: Clock, api: Dialect, body: dict[str, Any], non_streaming: str
) -> tuple[int, bytes]:
    ident = await key(ledger, "acct_N", "kidN00000000")
    service = CompletionService(
        ledger.holds, UpstreamRouter({}, SimulatedProvider()), deadline_s=900, clock=clock
    )
    services = stream_services(
        service, ident, default_catalog().aliases, non_streaming=non_streaming
    )
    raw = json.dumps(body).encode()
    protocol = FakeProtocol([raw])
    scope = FakeScope("POST", api.path, FakeHeaders([("content-length", str(len(raw)))]))
    await serve_stream(api, services, RSGIExchange(scope, protocol), "req_stream")
    answer = protocol.response.result()
    if answer.body is None:
        return answer.status, b"".join(c for c in protocol.stream.chunks if c)
    return answer.status, answer.body


@APIS
@pytest.mark.parametrize("stream", ["left out", False, None])
async def test_a_request_not_asking_for_a_stream_is_refused_before_anything_is_held(
    ledger_: Ledgers, clock: Clock, api: Dialect, stream: object
) -> None:
    body = dict(BODIES[api])
    if stream != "left out":
        body["stream"] = stream
    await key(ledger_, "acct_N", "kidN00000000")
    before = await snapshot(ledger_)
    status, answer = await _serve(ledger_, clock, api, body, "refuse")
    error = json.loads(answer)
    assert status == 400, answer
    if api is MESSAGES:  # Anthropic's shape: no param; the message names the field
        assert (error["type"], error["error"]["type"]) == ("error", "invalid_request_error")
    else:
        assert error["error"]["code"] == "stream_required"
        assert error["error"]["param"] == "stream"
    assert "'stream: true'" in answer.decode()
    assert await snapshot(ledger_) == before  # nothing held, counted or logged


@APIS
async def test_a_streamed_request_is_served_when_others_are_refused(
    ledger_: Ledgers, clock: Clock, api: Dialect
) -> None:
    status, answer = await _serve(ledger_, clock, api, {**BODIES[api], "stream": True}, "refuse")
    assert status == 200, answer
    assert b'"credits_used"' in answer


@APIS
async def test_by_default_a_request_not_asking_for_a_stream_is_streamed(
    ledger_: Ledgers, clock: Clock, api: Dialect
) -> None:
    assert Settings().non_streaming == "stream"
    status, answer = await _serve(ledger_, clock, api, BODIES[api], "stream")
    assert status == 200, answer
    assert b'"credits_used"' in answer
