"""A client that hangs up before the upstream's usage report pays that report, not svc's
estimate (issue 30, item 1): the relay reads on for the report, within its one-second bound,
whether the client's leaving is told by the disconnect watcher or by a write that fails;
and a stream that ends without any report is billed by an estimate of the text relayed
that does not undercount dense text.

Served through ``serve_stream`` (the HTTP layer's disconnect watcher, as granian drives it)
on fakeredis, a real Valkey and the Valkey Cluster; each test ends with the money
invariants for the account (no hold left, balance and usage counters agree, nothing left
for the sweeper)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import pytest

from app.apis.chat import CHAT
from app.apis.dialect import Dialect
from app.apis.responses import RESPONSES
from app.completion.catalog import Alias, default_catalog
from app.completion.relay import USAGE_WAIT_S
from app.completion.router import UpstreamRouter
from app.completion.service import CompletionService
from app.completion.settlement import drain_background
from app.core.clock import day_tag, utc_day
from app.credits.outcomes import Identity, Tokens
from app.credits.sweeper import Sweeper
from app.http.rsgi.exchange import RSGIExchange
from app.http.streams import serve_stream
from app.runtime import Services
from app.upstream.base import CHOICE_END, Piece, UpstreamCall, Usage
from app.upstream.responses_sse import ResponsesEvents
from app.upstream.simulated import SimulatedProvider
from app.upstream.sse import LineSplitter
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.pricing import charge
from tests.support.rsgi_transport import FakeHeaders, FakeProtocol, FakeScope
from tests.support.scripts_helpers import account, key
from tests.support.upstream_helpers import stream_services
from tests.unit.core.test_tokens_estimate import real_counts

FUNDS = 10_000_000
# The aliases as configured with a large output limit (an operator's models file may allow
# 100k output tokens): what a dense stream can cost is then not hidden by the default cap.
ALIASES: dict[str, Alias] = {
    name: msgspec.structs.replace(alias, max_output_tokens=100_000)
    for name, alias in default_catalog().aliases.items()
}
FAST = ALIASES["svc-fast"]
# Common Chinese prose (what a model writes), not random rare characters.
ZH = (
    "这个网关按积分计量每一个请求。当客户端打开一个流时，系统会为提示词和请求允许的最长回答预留足够的积分，"
    "在令牌到达时立即转发，并按照实际生成的内容结算预留。任何费用都不会重复收取：结算是幂等的。"
)

Script = list[tuple[float, list[Piece]]]  # (delay before, one read's pieces)


class ScriptedProvider:
    """Yields each read after its delay; then stalls (a stream that sends nothing more)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.closed = asyncio.Event()

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        try:
            for delay, pieces in self.script:
                await asyncio.sleep(delay)
                yield pieces
            await asyncio.sleep(3600)
        finally:
            self.closed.set()

    async def close(self) -> None:
        return None


def responses_pieces(*events: dict[str, Any]) -> list[Piece]:
    """The pieces a provider that serves the Responses API itself gives for ``events`` (its
    SSE parsed by ``app.upstream.responses_sse``, as the upstream clients do)."""
    sse = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return LineSplitter(ResponsesEvents().parse).feed(sse)


def _services(
    ledger: Ledgers,
    clock: Clock,
    ident: Identity,
    provider: ScriptedProvider,
    aliases: dict[str, Alias] = ALIASES,
) -> Services:
    router = UpstreamRouter({"simulated": provider}, SimulatedProvider())  # type: ignore[dict-item]
    completions = CompletionService(ledger.holds, router, deadline_s=900, clock=clock)
    return stream_services(completions, ident, aliases)


async def _served_until(
    ledger: Ledgers,
    clock: Clock,
    api: Dialect,
    body: dict[str, Any],
    provider: ScriptedProvider,
    leave_when: Callable[[bytes], bool],
    *,
    writes_notice_disconnect: bool = True,
    aliases: dict[str, Alias] = ALIASES,
) -> tuple[Identity, bytes]:
    """Serve ``body``; the client hangs up as soon as what it received satisfies
    ``leave_when``. Returns what it received."""
    await account(ledger, "acct_D", purchased=FUNDS)
    ident = await key(ledger, "acct_D", "kidD00000000")
    raw = json.dumps(body).encode()
    scope = FakeScope("POST", api.path, FakeHeaders([("content-length", str(len(raw)))]))
    protocol = FakeProtocol([raw], writes_notice_disconnect=writes_notice_disconnect)
    served = asyncio.ensure_future(
        serve_stream(
            api,
            _services(ledger, clock, ident, provider, aliases),
            RSGIExchange(scope, protocol),
            "req_leave",
        )
    )
    received = b""
    while not leave_when(received):
        protocol.stream.arrived.clear()
        await asyncio.wait_for(protocol.stream.arrived.wait(), 5)
        received = b"".join(c for c in protocol.stream.chunks if c)
    protocol.disconnect()  # the client hangs up right then
    await asyncio.wait_for(served, USAGE_WAIT_S + 2)
    await drain_background()
    assert provider.closed.is_set()  # the upstream's stream is closed, whatever it sent
    return ident, received


async def _check_money(ledger: Ledgers, clock: Clock, ident: Identity) -> dict[str, int]:
    """No hold left open, and none for the sweeper; the balance fell by what the usage
    counters (of the day and of all time) say was charged. Returns the all-time counters."""
    shard = ident.shard
    assert await ledger.redis.zcard(ledger.layout.reservations(shard)) == 0
    clock.advance(901)
    assert await Sweeper(ledger.holds, interval_s=1, clock=clock).sweep_once() == 0
    total = _counters(await ledger.redis.hgetall(ledger.layout.usage_total(shard, ident.pid)))
    day_key = ledger.layout.usage_day(shard, ident.pid, day_tag(utc_day(clock() - 901)))
    day = _counters(await ledger.redis.hgetall(day_key))
    assert {k: v for k, v in day.items() if ":key:" not in k and ":model:" not in k} == total
    _, balance = await ledger.money.balance(ident, clock())
    assert balance.total == FUNDS - total["live:credits"]
    assert total["live:requests"] == 1
    return total


def _counters(raw: dict[bytes | str, bytes | str]) -> dict[str, int]:
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}


def _billed(total: dict[str, int]) -> tuple[int, int, int]:
    return total["live:prompt_tokens"], total["live:completion_tokens"], total["live:credits"]


@pytest.mark.parametrize("writes_notice", [True, False], ids=["write-fails", "write-succeeds"])
async def test_chat_max_tokens_1_client_gone_before_the_report_pays_the_report(
    ledger: Ledgers, clock: Clock, writes_notice: bool
) -> None:
    """max_tokens 1: the one token is the whole output, the usage report follows it 0.1 s
    later, and the client hangs up on the token. The disconnect watcher used to cancel the
    usage read (it runs in the relay), so the estimate was billed (2 of 5 runs in the audit;
    here, every time)."""
    report = Usage(prompt_tokens=1_777, completion_tokens=1)
    provider = ScriptedProvider([(0, ["你"]), (0.1, [CHOICE_END, report])])
    body = {
        "model": "svc-fast",
        "messages": [{"role": "user", "content": ZH * 20}],
        "max_tokens": 1,
    }
    ident, received = await _served_until(
        ledger,
        clock,
        CHAT,
        body,
        provider,
        lambda got: "你".encode() in got,
        writes_notice_disconnect=writes_notice,
    )
    assert b"[DONE]" not in received
    total = await _check_money(ledger, clock, ident)
    assert _billed(total) == (1_777, 1, charge(FAST.price, Tokens(1_777, 1)))


async def test_responses_last_delta_alone_client_gone_pays_the_report(
    ledger: Ledgers, clock: Clock
) -> None:
    """/v1/responses on a provider that speaks Responses: a large CJK answer whose last
    delta comes alone, response.completed 0.1 s after it, and the client hangs up on that
    last delta. It used to be billed 2 output tokens (the deltas relayed) instead of the
    provider's 9,000 (the audit: 200,000 CJK characters for 2,504 credits, not 10,005)."""
    first, last = ZH * 60, ZH * 40 + "完"
    completed = {
        "type": "response.completed",
        "response": {"usage": {"input_tokens": 321, "output_tokens": 9_000}},
    }
    script: Script = [
        (0, responses_pieces({"type": "response.output_text.delta", "delta": first})),
        (0, responses_pieces({"type": "response.output_text.delta", "delta": last})),
        (0.1, responses_pieces(completed)),
    ]
    provider = ScriptedProvider(script)
    body = {
        "model": "svc-fast",
        "input": ZH * 4,
        "max_output_tokens": 50_000,
        "stream": True,
    }
    ident, received = await _served_until(
        ledger, clock, RESPONSES, body, provider, lambda got: "完".encode() in got
    )
    assert b"response.completed" not in received
    total = await _check_money(ledger, clock, ident)
    assert _billed(total) == (321, 9_000, charge(FAST.price, Tokens(321, 9_000)))


async def test_no_report_dense_text_is_billed_by_its_tokens_not_its_chunks(
    ledger: Ledgers, clock: Clock
) -> None:
    """An upstream that never reports usage relays 50,000 CJK characters in five reads;
    the client hangs up after the last, the relay gives up on the report after its bound.
    The completion is billed at least what real tokenizers count for the text relayed
    (it used to be 5 tokens: one per read; chars/4 would be 12,500)."""
    text = (ZH * (50_000 // len(ZH) + 1))[:49_999] + "完"
    parts = [text[i : i + 10_000] for i in range(0, 50_000, 10_000)]
    provider = ScriptedProvider([(0, [part]) for part in parts])
    body = {
        "model": "svc-fast",
        "messages": [{"role": "user", "content": "写"}],
        "max_tokens": 90_000,
    }
    ident, _ = await _served_until(
        ledger, clock, CHAT, body, provider, lambda got: "完".encode() in got
    )
    total = await _check_money(ledger, clock, ident)
    _prompt, completion, credits = _billed(total)
    real = max(counts[0] for counts in real_counts([text]).values())
    assert completion >= real > 50_000 // 4 * 3
    assert completion <= 90_000
    assert credits == charge(FAST.price, Tokens(total["live:prompt_tokens"], completion))


async def test_a_choice_end_read_after_the_cap_leaves_the_answer_cut(
    ledger: Ledgers, clock: Clock
) -> None:
    """Past the output cap the relay reads on for the usage report; the provider's end of
    the answer, read there in a later read than the last token, must not turn the cut
    answer into a complete one (it did: CI saw response.completed once)."""
    words = [{"type": "response.output_text.delta", "delta": f"w{n} "} for n in range(16)]
    incomplete = {
        "type": "response.incomplete",
        "response": {
            "incomplete_details": {"reason": "max_output_tokens"},
            "usage": {"input_tokens": 5, "output_tokens": 16},
        },
    }
    provider = ScriptedProvider(
        [(0, responses_pieces(*words)), (0.05, responses_pieces(incomplete))]
    )
    body = {"model": "svc-fast", "input": "Go on.", "max_output_tokens": 16}
    ident, received = await _served_until(
        ledger, clock, RESPONSES, body, provider, lambda got: b'"sequence_number"' in got
        and (b"response.incomplete" in got or b"response.completed" in got),
    )  # fmt: skip
    assert b"response.incomplete" in received
    assert b"response.completed" not in received
    total = await _check_money(ledger, clock, ident)
    assert _billed(total) == (5, 16, charge(FAST.price, Tokens(5, 16)))
