"""What a completion is charged: the upstream's reported usage at the alias price, however
token-dense the prompt, whatever the upstream reports, and wherever a cancellation lands.

Each test runs on fakeredis, a real Valkey and the Valkey Cluster (the ``ledger`` fixture)
and ends with the money invariants (docs/architecture.md, Money rules) for the account."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from app.apis.chat.request import parse_chat_request
from app.completion.catalog import default_catalog
from app.completion.completion import Completion
from app.completion.request import CompletionRequest
from app.completion.router import UpstreamRouter
from app.completion.service import CompletionService
from app.completion.settlement import billed_parts, drain_background
from app.core.clock import day_tag, utc_day
from app.core.tokens import utf8_length
from app.credits.outcomes import Identity, Tokens
from app.kv.fields import (
    COUNTERS,
    GROUP_KEY,
    GROUP_MODEL,
    UsageCounters,
    group_counters,
    group_values,
)
from app.upstream.base import Piece, UpstreamCall, Usage
from app.upstream.simulated import SimulatedProvider
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.pricing import charge
from tests.support.scripts_helpers import account, key

FUNDS = 10_000_000
ALIASES = default_catalog().aliases


class ReportingProvider:
    """Streams ``tokens`` one per read, ignoring max_tokens when told to, then reports
    ``usage`` (a function of the call, like a real tokenizer's count)."""

    def __init__(
        self,
        usage: Usage | None,
        *,
        tokens: int = 5,
        ignore_max_tokens: bool = False,
        close_delay_s: float = 0.0,
    ) -> None:
        self.usage = usage
        self.tokens = tokens
        self.ignore_max_tokens = ignore_max_tokens
        self.close_delay_s = close_delay_s
        self.closing = asyncio.Event()

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        count = self.tokens if self.ignore_max_tokens else min(self.tokens, call.max_tokens)
        try:
            for i in range(count):
                await asyncio.sleep(0)
                yield [f" t{i}"]
            if self.usage is not None:
                yield [self.usage]
        finally:
            # like httpx's response.aclose(): closing the stream suspends
            self.closing.set()
            if self.close_delay_s:
                await asyncio.sleep(self.close_delay_s)

    async def close(self) -> None:
        return None


async def _open(
    ledger: Ledgers, clock: Clock, provider: ReportingProvider, body: dict[str, object]
) -> tuple[Identity, Completion]:
    await account(ledger, "acct_B", purchased=FUNDS)
    ident = await key(ledger, "acct_B", "kidB00000000")
    router = UpstreamRouter({"simulated": provider}, SimulatedProvider())  # type: ignore[dict-item]
    service = CompletionService(ledger.holds, router, deadline_s=900, clock=clock)
    params = parse_chat_request(json.dumps(body).encode(), ALIASES)
    return ident, await service.open(ident, params)


async def _relay(completion: Completion) -> dict[str, object]:
    writes: list[bytes] = []

    async def send(data: bytes, more: bool) -> None:
        writes.append(data)

    await completion.relay(send)
    events = [e for e in b"".join(writes).decode().split("\n\n") if e.startswith("data: {")]
    meta: dict[str, object] = json.loads(events[-1][6:])["svc"]
    return meta


async def _check_money(ledger: Ledgers, clock: Clock, ident: Identity, charged: int) -> None:
    """No hold left open; the balance fell by exactly what was charged, and the usage
    counters of the day and of all time both say so."""
    await drain_background()
    shard = ident.shard
    assert await ledger.redis.zcard(ledger.layout.reservations(shard)) == 0
    _, balance = await ledger.money.balance(ident, clock())
    assert balance.total == FUNDS - charged
    day = await ledger.redis.hgetall(ledger.layout.usage_day(shard, ident.pid, _tag(clock)))
    total = await ledger.redis.hgetall(ledger.layout.usage_total(shard, ident.pid))
    overall = {k: v for k, v in day.items() if b":key:" not in k and b":model:" not in k}
    assert overall == total
    assert int(total.get(b"live:credits", 0)) == charged
    # the day's one key and its one model each counted all of it
    fields = {k.decode(): int(v) for k, v in day.items()}
    day_counts = UsageCounters(*(fields.get(f"live:{c}", 0) for c in COUNTERS))
    # a group counts prompt and completion tokens as one
    whole = UsageCounters(*group_values(day_counts)[:2], 0, day_counts.credits)
    served = [whole] if whole.requests else []
    assert list(group_counters(fields, "live", GROUP_KEY).items()) == [
        (ident.kid, w) for w in served
    ]
    assert list(group_counters(fields, "live", GROUP_MODEL).values()) == served


def _tag(clock: Clock) -> str:
    return day_tag(utc_day(clock()))


def _messages(text: str) -> dict[str, object]:
    return {"model": "svc-code", "messages": [{"role": "user", "content": text}], "max_tokens": 32}


DENSE_PROMPTS = {
    "cjk": "的" * 200_000,
    "emoji": "🙂" * 50_000,
    "base64": "QUJD/+8=" * 25_000,
}


@pytest.mark.parametrize("name", sorted(DENSE_PROMPTS))
async def test_a_token_dense_prompt_is_charged_what_the_upstream_reports(
    ledger: Ledgers, clock: Clock, name: str
) -> None:
    """The reservation bounds what an upstream can report (UTF-8 bytes), so the charge is
    the reported usage at the alias price, never a cut-off estimate. 200,000 '的' used to be
    held for 50,004 tokens and charged 1,003 credits instead of 4,002."""
    text = DENSE_PROMPTS[name]
    # the worst honest tokenizer: one token per byte, plus a template's tokens
    reported = Usage(prompt_tokens=utf8_length(text) + 7, completion_tokens=5)
    ident, completion = await _open(ledger, clock, ReportingProvider(reported), _messages(text))
    assert completion.hold.amount >= charge(
        ALIASES["svc-code"].price, Tokens(reported.prompt_tokens, 32)
    )
    meta = await _relay(completion)
    expected = charge(ALIASES["svc-code"].price, Tokens(reported.prompt_tokens, 5))
    assert meta["credits_used"] == expected
    await _check_money(ledger, clock, ident, expected)
    total = await ledger.redis.hgetall(ledger.layout.usage_total(ident.shard, ident.pid))
    assert int(total[b"live:prompt_tokens"]) == reported.prompt_tokens


def test_the_prompt_bound_covers_every_byte_and_the_template() -> None:
    """The text counts by the body's bytes (at least its UTF-8), an image by its bound."""
    body = {"model": "svc-fast", "messages": [{"role": "user", "content": "的" * 10}]}
    raw = json.dumps(body, ensure_ascii=False).encode()
    assert parse_chat_request(raw, ALIASES).prompt_token_bound == len(raw) + 8 + 32 >= 30 + 40
    url = "data:image/png;base64," + "A" * 100_000
    parts = [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": url}}]
    raw = json.dumps({"model": "svc-fast", "messages": [{"role": "user", "content": parts}]})
    params = parse_chat_request(raw.encode(), ALIASES, image_token_bound=4_096)
    assert params.prompt_token_bound == len(raw) - len(url) + 8 + 32 + 4_096
    assert utf8_length("\ud800") == 3  # a lone surrogate (valid JSON) is counted, not refused


async def test_usage_after_the_output_cap_is_still_read(ledger: Ledgers, clock: Clock) -> None:
    """An upstream that ignores max_tokens is cut at the reserved output tokens; its usage
    report after them still decides the prompt's charge (it used to be the estimate)."""
    text = "的" * 20_000
    reported = Usage(prompt_tokens=20_034, completion_tokens=50)
    provider = ReportingProvider(reported, tokens=50, ignore_max_tokens=True)
    ident, completion = await _open(ledger, clock, provider, _messages(text))
    meta = await _relay(completion)
    expected = charge(
        ALIASES["svc-code"].price, Tokens(20_034, 32)
    )  # completion capped at the hold
    assert meta["credits_used"] == expected
    await _check_money(ledger, clock, ident, expected)
    total = await ledger.redis.hgetall(ledger.layout.usage_total(ident.shard, ident.pid))
    assert (int(total[b"live:prompt_tokens"]), int(total[b"live:completion_tokens"])) == (
        20_034,
        32,
    )


@pytest.mark.parametrize(
    ("prompt", "completion"),
    [(10**30, 5), (-99_980, 5), (10**18, 5), (5, 10**30), (5, -7), (-1, -1)],
)
async def test_hostile_usage_is_clamped_to_the_hold(
    ledger: Ledgers, clock: Clock, prompt: int, completion: int
) -> None:
    """Whatever an upstream reports, settle runs whole: counts are clamped to 0 .. what the
    reservation held for, the charge stays within the hold, and the day and all-time
    counters agree (10^30 used to fail settle.lua half-way)."""
    provider = ReportingProvider(Usage(prompt_tokens=prompt, completion_tokens=completion))
    ident, completion_ = await _open(ledger, clock, provider, _messages("hello there"))
    params: CompletionRequest = completion_.params
    meta = await _relay(completion_)
    billed_prompt = min(max(prompt, 0), params.prompt_token_bound)
    billed_completion = min(max(completion, 5), completion_.hold.out_tokens)
    expected = charge(params.alias.price, Tokens(billed_prompt, billed_completion))
    assert meta["credits_used"] == expected <= completion_.hold.amount
    await _check_money(ledger, clock, ident, expected)
    total = await ledger.redis.hgetall(ledger.layout.usage_total(ident.shard, ident.pid))
    assert int(total[b"live:prompt_tokens"]) == billed_prompt


async def test_a_cancellation_while_the_upstream_closes_cannot_skip_settlement(
    ledger: Ledgers, clock: Clock
) -> None:
    """httpx's aclose() suspends: a client disconnect landing there, right after a
    max_tokens cut, used to skip the settle, leaving the hold to the sweeper (and the
    content free)."""
    provider = ReportingProvider(
        Usage(11, 40), tokens=40, ignore_max_tokens=True, close_delay_s=0.2
    )
    ident, completion = await _open(ledger, clock, provider, _messages("hi"))

    async def send(data: bytes, more: bool) -> None:
        return None

    relay = asyncio.ensure_future(completion.relay(send))
    await asyncio.wait_for(provider.closing.wait(), 5)
    relay.cancel()  # the disconnect arrives while the upstream is being closed
    with pytest.raises(asyncio.CancelledError):
        await relay
    expected = charge(ALIASES["svc-code"].price, Tokens(11, 32))
    await _check_money(ledger, clock, ident, expected)


async def test_a_reserve_answered_too_late_is_released_in_the_background(
    ledger: Ledgers, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis ran the reserve, but its reply came after the caller's timeout (a paused
    Redis answering its backlog): the request fails with the timeout, and the hold it could
    not learn of is released by its id, not left for the sweeper."""
    from app.completion import service as service_module
    from app.kv.client import REDIS_TIMEOUT

    monkeypatch.setattr(service_module, "RELEASE_FIRST_PAUSE_S", 0.01)
    reserve = ledger.holds.reserve

    async def reserve_then_time_out(*args: object, **kwargs: object) -> object:
        await reserve(*args, **kwargs)  # type: ignore[arg-type]
        raise REDIS_TIMEOUT("Timeout reading from Redis")

    monkeypatch.setattr(ledger.holds, "reserve", reserve_then_time_out)
    with pytest.raises(REDIS_TIMEOUT):
        await _open(ledger, clock, ReportingProvider(None), _messages("hi"))
    ident = Identity("acct_B", "kidB00000000", "live", ledger.layout.shard("acct_B"))
    await _check_money(ledger, clock, ident, charged=0)


@pytest.mark.parametrize(
    ("usage", "parts"),
    [
        (Usage(100, 10), (0, 0, 0)),
        (Usage(100, 10, {"cached_tokens": 80}, {"reasoning_tokens": 4}), (80, 0, 4)),
        (Usage(100, 10, {"cached_tokens": 50, "cache_write_tokens": 30}), (50, 30, 0)),
        (Usage(100, 10, {"cache_creation_input_tokens": 70}), (0, 70, 0)),
        # hostile: more than the whole, negative
        (Usage(100, 10, {"cached_tokens": 10**9}, {"reasoning_tokens": 10**9}), (100, 0, 10)),
        (Usage(100, 10, {"cached_tokens": 60, "cache_write_tokens": 10**6}), (60, 40, 0)),
        (Usage(100, 10, {"cached_tokens": -5, "cache_write_tokens": -5}, {"x": -1}), (0, 0, 0)),
        (Usage(100, 10, None, {"reasoning_tokens": -1}), (0, 0, 0)),
    ],
)
def test_the_parts_billed_are_clamped_to_their_whole(
    usage: Usage, parts: tuple[int, int, int]
) -> None:
    billed = billed_parts(usage, 100, 10)
    assert billed == Tokens(100, 10, *parts)
