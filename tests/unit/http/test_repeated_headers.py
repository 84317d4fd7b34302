"""A header svc takes one value of, sent more than once (issue 44, item 6): granian hands
over the first, so two ``svc-max-credits`` headers used to hold the request to the first
and ignore a lower ceiling after it; two ``Idempotency-Key`` headers recorded the request
under the first. Either is now the 400 ``invalid_value`` naming the header, on each API in
its own error shape, before anything is reserved."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import fakeredis
import pytest

from app.apis.chat import CHAT
from app.apis.dialect import Dialect
from app.apis.messages import MESSAGES
from app.apis.responses import RESPONSES
from app.completion.catalog import default_catalog
from app.completion.router import UpstreamRouter
from app.completion.service import CompletionService
from app.credits.outcomes import Identity
from app.http.rsgi.exchange import RSGIExchange
from app.http.streams import serve_stream
from app.kv.layout import KeySpace
from app.runtime import Services
from app.upstream.simulated import SimulatedProvider
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.rsgi_transport import FakeHeaders, FakeProtocol, FakeScope
from tests.support.scripts_helpers import account, key, snapshot
from tests.support.upstream_helpers import stream_services

MSG = [{"role": "user", "content": "hi"}]
BODIES = {
    CHAT: {"model": "svc-fast", "messages": MSG, "stream": True},
    RESPONSES: {"model": "svc-fast", "input": "hi", "stream": True},
    MESSAGES: {"model": "svc-fast", "messages": MSG, "max_tokens": 16, "stream": True},
}
REPEATED = [
    ("svc-max-credits", ["500", "1"], "svc-max-credits"),  # the lower one second
    ("idempotency-key", ["first", "second"], "Idempotency-Key"),
    ("Idempotency-Key", ["same", "same"], "Idempotency-Key"),
]


@pytest.fixture
async def served(clock: Clock) -> AsyncIterator[tuple[Ledgers, Identity, Services]]:
    redis_client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    ledger = Ledgers(redis_client, KeySpace("svc", 64), cap_ttl_s=172_800, usage_ttl_s=86_400)
    await account(ledger, "acct_R", purchased=10_000)
    ident = await key(ledger, "acct_R", "kidR00000000")
    service = CompletionService(
        ledger.holds, UpstreamRouter({}, SimulatedProvider()), deadline_s=900, clock=clock
    )
    yield ledger, ident, stream_services(service, ident, default_catalog().aliases)
    await redis_client.aclose()


async def _serve(
    services: Services, api: Dialect, headers: list[tuple[str, str]]
) -> tuple[int, bytes]:
    body = json.dumps(BODIES[api]).encode()
    pairs = [("content-length", str(len(body))), *headers]
    protocol = FakeProtocol([body])
    scope = FakeScope("POST", api.path, FakeHeaders(pairs))
    await serve_stream(api, services, RSGIExchange(scope, protocol), "req_repeated")
    answer = protocol.response.result()
    if answer.body is None:  # a stream
        return answer.status, b"".join(c for c in protocol.stream.chunks if c)
    return answer.status, answer.body


@pytest.mark.parametrize(("name", "values", "param"), REPEATED)
@pytest.mark.parametrize("api", [CHAT, RESPONSES, MESSAGES], ids=lambda api: api.path)
async def test_a_repeated_header_is_a_400_naming_it_and_nothing_is_reserved(
    served: tuple[Ledgers, Identity, Services],
    api: Dialect,
    name: str,
    values: list[str],
    param: str,
) -> None:
    ledger, _ident, services = served
    before = await snapshot(ledger)
    status, body = await _serve(services, api, [(name, value) for value in values])
    answer = json.loads(body)
    assert status == 400, body
    if api is MESSAGES:  # Anthropic's shape: no param, the message names the header
        assert answer["type"] == "error"
        assert answer["error"]["type"] == "invalid_request_error"
        assert param in answer["error"]["message"]
    else:
        error = answer["error"]
        assert (error["code"], error["param"]) == ("invalid_value", param)
    assert "more than once" in body.decode()
    assert await snapshot(ledger) == before  # nothing held, counted or logged


@pytest.mark.parametrize("api", [CHAT, RESPONSES, MESSAGES], ids=lambda api: api.path)
async def test_a_ceiling_sent_once_is_served(
    served: tuple[Ledgers, Identity, Services], api: Dialect
) -> None:
    _ledger, _ident, services = served
    status, body = await _serve(services, api, [("svc-max-credits", "500")])
    assert status == 200, body
    assert b'"credits_used"' in body
