"""Usage counts an upstream sends that are not counts (issue 44, item 5): ``true`` (which
Python takes for 1), a negative, a float, a string, a number past what JSON clients read.
Whichever API the upstream speaks, the stream ends properly with its metadata, the report
with such a count is not taken (svc's estimate bills, as for a stream that reported
nothing), a detail that is not a count is left out, and the money rules hold (no hold
left, nothing for the sweeper, the balance fell by what the counters say, within the
hold). And a provider that serves the Messages API itself: a client that leaves before
``message_delta`` is billed the provider's ``message_start`` counts, its cache writes at
the cache-write price, not svc's estimate of the prompt.

Served through ``serve_stream`` on fakeredis, a real Valkey and the Valkey Cluster."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from app.apis.chat import CHAT
from app.apis.dialect import Dialect
from app.apis.messages import MESSAGES
from app.apis.responses import RESPONSES
from app.completion.catalog import price
from app.completion.router import UpstreamRouter
from app.completion.service import CompletionService
from app.completion.settlement import drain_background
from app.credits.outcomes import Identity, Tokens
from app.credits.sweeper import Sweeper
from app.http.rsgi.exchange import RSGIExchange
from app.http.streams import serve_stream
from app.runtime import Services
from app.upstream.base import Piece, UpstreamCall
from app.upstream.messages_sse import MessagesEvents
from app.upstream.responses_sse import ResponsesEvents
from app.upstream.simulated import SimulatedProvider
from app.upstream.sse import LineParser, LineSplitter, parse_data_line
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.pricing import charge
from tests.support.rsgi_transport import FakeHeaders, FakeProtocol, FakeScope
from tests.support.scripts_helpers import account, key
from tests.support.upstream_helpers import stream_services
from tests.unit.completion.test_usage_after_disconnect import (
    ALIASES,
    FUNDS,
    ScriptedProvider,
    _billed,
    _check_money,
    _served_until,
)

# cache reads, cache writes and the rest of the prompt each at its own price
PRICED = msgspec.structs.replace(ALIASES["svc-fast"], price=price(50, 150, 10, 70))
HOSTILE: list[object] = [True, -5, 12.0, "12", 2**64]


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events)


class WholeProvider:
    """Sends ``sse`` (the upstream's bytes, in one read) through ``parse`` as the upstream
    clients do, then ends."""

    def __init__(self, sse: bytes, parse: LineParser) -> None:
        self.sse = sse
        self.parse = parse
        self.closed = asyncio.Event()

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        try:
            splitter = LineSplitter(self.parse)
            yield splitter.feed(self.sse)
        finally:
            self.closed.set()

    async def close(self) -> None:
        return None


async def _served(
    ledger: Ledgers,
    api: Dialect,
    body: dict[str, Any],
    provider: WholeProvider,
    clock: Clock,
    *,
    opened: bool = False,
) -> tuple[Identity, bytes]:
    """Serve ``body`` to its end (``opened``: the account is there already); what the
    client received."""
    if not opened:
        await account(ledger, "acct_H", purchased=FUNDS)
    ident = await key(ledger, "acct_H", "kidH00000000")
    router = UpstreamRouter({"simulated": provider}, SimulatedProvider())  # type: ignore[dict-item]
    completions = CompletionService(ledger.holds, router, deadline_s=900, clock=clock)
    services: Services = stream_services(completions, ident, {"svc-fast": PRICED})
    raw = json.dumps(body).encode()
    scope = FakeScope("POST", api.path, FakeHeaders([("content-length", str(len(raw)))]))
    protocol = FakeProtocol([raw])
    await asyncio.wait_for(
        serve_stream(api, services, RSGIExchange(scope, protocol), "req_hostile"), 5
    )
    await drain_background()
    return ident, b"".join(c for c in protocol.stream.chunks if c)


def _chat(value: object, where: str) -> tuple[Dialect, dict[str, Any], WholeProvider, bytes]:
    usage: dict[str, Any] = {"prompt_tokens": 40, "completion_tokens": 2}
    if where == "details":
        usage["prompt_tokens_details"] = {"cached_tokens": value}
    else:
        usage[where] = value
    sse = _sse(
        {"choices": [{"delta": {"content": "Hi there"}, "finish_reason": None}]},
        {"choices": [{"delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": usage},
    )
    body = {
        "model": "svc-fast",
        "messages": [{"role": "user", "content": "Say hi."}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return CHAT, body, WholeProvider(sse + b"data: [DONE]\n\n", parse_data_line), b"[DONE]"


def _responses(value: object, where: str) -> tuple[Dialect, dict[str, Any], WholeProvider, bytes]:
    usage: dict[str, Any] = {"input_tokens": 40, "output_tokens": 2}
    if where == "details":
        usage["input_tokens_details"] = {"cached_tokens": value}
    else:
        usage[where.replace("prompt", "input").replace("completion", "output")] = value
    sse = _sse(
        {"type": "response.output_text.delta", "delta": "Hi there"},
        {"type": "response.completed", "response": {"usage": usage}},
    )
    body = {"model": "svc-fast", "input": "Say hi.", "stream": True}
    return RESPONSES, body, WholeProvider(sse, ResponsesEvents().parse), b"response.completed"


def _messages(value: object, where: str) -> tuple[Dialect, dict[str, Any], WholeProvider, bytes]:
    start = {"input_tokens": 40, "output_tokens": 1}
    end: dict[str, Any] = {"output_tokens": 2}
    if where == "details":
        start["cache_read_input_tokens"] = value  # type: ignore[assignment]
    elif where == "prompt_tokens":
        start["input_tokens"] = value  # type: ignore[assignment]
    else:
        end["output_tokens"] = value
    sse = _sse(
        {"type": "message_start", "message": {"usage": start}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": end},
        {"type": "message_stop"},
    )
    body = {
        "model": "svc-fast",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Say hi."}],
        "stream": True,
    }
    return MESSAGES, body, WholeProvider(sse, MessagesEvents().parse), b"message_stop"


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize("where", ["prompt_tokens", "completion_tokens", "details"])
@pytest.mark.parametrize("api", [_chat, _responses, _messages], ids=lambda f: f.__name__[1:])
async def test_a_count_that_is_not_one_is_not_taken(
    ledger: Ledgers, clock: Clock, api: Any, where: str, value: object
) -> None:
    served_api, body, provider, last = api(value, where)
    ident, received = await _served(ledger, served_api, body, provider, clock)
    assert last in received  # the stream ended as it does
    assert b'"svc":{"requested_model":"svc-fast","credits_used":' in received
    for failed in (b'data: {"error"', b"event: error", b"response.failed"):
        assert failed not in received
    total = await _check_money(ledger, clock, ident)
    prompt, completion, credits = _billed(total)
    assert total.get("live:cached_tokens", 0) == 0  # no detail taken for a count
    if where == "details":  # the rest of the report is the provider's
        assert (prompt, completion) == (40, 2)
    elif served_api is MESSAGES and where == "completion_tokens":
        # message_delta's count is not one: the last count it reported, message_start's,
        # stands (and the output relayed is at least a token)
        assert (prompt, completion) == (40, 1)
    else:  # no report: svc's estimate, never the hostile number
        assert prompt not in (0, 1, 12, 40)
        assert prompt < 1000
        assert 1 <= completion < 10
    assert credits == charge(PRICED.price, Tokens(prompt, completion))


async def test_a_client_gone_before_message_delta_pays_message_starts_counts(
    ledger: Ledgers, clock: Clock
) -> None:
    """The provider's message_start says 21 uncached prompt tokens, 480 read from its cache
    and 700 written to it (1,201 in all); the client leaves while the answer still comes,
    before message_delta. It is billed those counts, each part at its price, and the output
    relayed by svc's estimate (it used to be billed svc's estimate of the prompt, its cache
    writes priced as input)."""
    start = {
        "input_tokens": 21,
        "cache_creation_input_tokens": 700,
        "cache_read_input_tokens": 480,
        "output_tokens": 1,
    }
    text = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}

    def delta(word: str) -> dict[str, Any]:
        text_delta = {"type": "text_delta", "text": word}
        return {"type": "content_block_delta", "index": 0, "delta": text_delta}

    parser = MessagesEvents().parse
    splitter = LineSplitter(parser)
    first = splitter.feed(_sse({"type": "message_start", "message": {"usage": start}}, text))
    script = [
        (0.0, first + splitter.feed(_sse(delta("Once ")))),
        (0.05, splitter.feed(_sse(delta("upon ")))),
        (0.05, splitter.feed(_sse(delta("a time")))),
    ]  # then nothing: message_delta never comes within the relay's bound
    body = {
        "model": "svc-fast",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Tell me a story. " * 120}],
        "stream": True,
    }
    provider = ScriptedProvider(script)
    ident, received = await _served_until(
        ledger,
        clock,
        MESSAGES,
        body,
        provider,
        lambda got: b"a time" in got,
        aliases={"svc-fast": PRICED},
    )
    assert b"message_delta" not in received
    total = await _check_money(ledger, clock, ident)
    prompt, completion, credits = _billed(total)
    assert prompt == 1_201
    assert 3 <= completion < 10
    assert credits == charge(PRICED.price, Tokens(1_201, completion, 480, 700))


async def test_hostile_reports_and_start_counts_settle_right_at_once(
    ledger: Ledgers, clock: Clock
) -> None:
    """60 streams of one account at once, each API with each kind of count that is not one,
    and Messages streams whose report at the end never comes: every hold is settled once,
    for what its own stream billed, and the balance fell by exactly what the counters say."""
    await account(ledger, "acct_H", purchased=FUNDS)
    cases = [
        make(value, where)
        for make in (_chat, _responses, _messages)
        for value in (True, -1, 1.5, "9")
        for where in ("prompt_tokens", "completion_tokens", "details")
    ] + [_messages_without_their_end() for _ in range(24)]
    served = await asyncio.gather(
        *(
            _served(ledger, api, body, provider, clock, opened=True)
            for api, body, provider, _last in cases
        )
    )
    assert all(b'"credits_used"' in received for _ident, received in served)
    ident = served[0][0]
    assert await ledger.redis.zcard(ledger.layout.reservations(ident.shard)) == 0
    clock.advance(901)
    assert await Sweeper(ledger.holds, interval_s=1, clock=clock).sweep_once() == 0
    total = await ledger.redis.hgetall(ledger.layout.usage_total(ident.shard, ident.pid))
    counted = {k.decode(): int(v) for k, v in total.items()}
    assert counted["live:requests"] == len(cases)
    _, balance = await ledger.money.balance(ident, clock())
    assert balance.total == FUNDS - counted["live:credits"]


def _messages_without_their_end() -> tuple[Dialect, dict[str, Any], WholeProvider, bytes]:
    """A Messages stream that ends at message_stop without message_delta: message_start's
    counts are its report (1,201 prompt tokens, 480 of them cached, 700 written)."""
    start = {
        "input_tokens": 21,
        "cache_creation_input_tokens": 700,
        "cache_read_input_tokens": 480,
        "output_tokens": 1,
    }
    sse = _sse(
        {"type": "message_start", "message": {"usage": start}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "message_stop"},
    )
    body = {
        "model": "svc-fast",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Tell me a story. " * 120}],
        "stream": True,
    }
    return MESSAGES, body, WholeProvider(sse, MessagesEvents().parse), b"message_stop"
