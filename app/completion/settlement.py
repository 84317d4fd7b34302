"""A completion's hold on credits: kept alive while its stream lives (``Heartbeat``), closed
for what was generated (``Settling``) in a task no cancellation reaches, and the registry of
those tasks that graceful shutdown waits for (``drain_background``).

A heartbeat Redis does not answer ends the stream (``LedgerUnreachable``); a settlement
that fails leaves the hold to the sweeper, which refunds it after its deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from app.completion.costs import UpstreamCost, cost_micros
from app.completion.request import CompletionRequest
from app.core.errors import LedgerUnreachable
from app.core.metrics import METRICS, BilledTokens
from app.core.settings import HEARTBEATS_PER_DEADLINE
from app.core.tokens import estimate_tokens
from app.credits.idempotency import RecordedResponse
from app.credits.money import Money
from app.credits.outcomes import Hold, Identity, ScriptStatus, Settlement, Tokens
from app.kv.client import REDIS_ERRORS
from app.kv.fields import USAGE_ESTIMATED, USAGE_UPSTREAM, Served
from app.upstream.base import StartUsage, Usage

T = TypeVar("T")
log = logging.getLogger("svc.completions")
_background: set[asyncio.Task[Any]] = set()
_NONE: dict[str, int] = {}  # the details of a usage report that gave none
CACHE_WRITE_DETAILS = ("cache_write_tokens", "cache_creation_input_tokens")
"""The names under ``usage.prompt_tokens_details`` of the prompt tokens an upstream wrote to
its cache, for providers that report (and price) those apart: Anthropic-style
``cache_creation_input_tokens``, or ``cache_write_tokens``. OpenAI reports none (its
``cached_tokens`` are the reads)."""


class SettlementTerms(Protocol):
    """What keeping a hold and settling it use of the service that opened the completion
    (``app.completion.service.CompletionService``)."""

    money: Money
    deadline_s: int
    clock: Callable[[], float]


def in_background(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Start ``coro`` as a task of its own that no caller's cancellation reaches (graceful
    shutdown waits for it: ``drain_background``)."""
    task = asyncio.ensure_future(coro)
    _background.add(task)
    task.add_done_callback(_finished)
    return task


def _finished(task: asyncio.Task[Any]) -> None:
    _background.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: whoever waited for it reports it, or nobody needs to


async def drain_background() -> None:
    """Wait for settlements still running (graceful shutdown)."""
    while _background:
        await asyncio.gather(*list(_background), return_exceptions=True)


def report_abandoned_settlement(task: asyncio.Task[Settlement]) -> None:
    """One line for a settlement of a stream that is gone (the request's handler, which
    reports the others, has returned)."""
    if task.cancelled():
        return
    exc = task.exception()
    if isinstance(exc, REDIS_ERRORS):
        log.warning(
            "settlement failed (%s): the sweeper refunds the reservation after its deadline",
            type(exc).__name__,
        )
    elif exc is not None:
        log.error("settlement failed", exc_info=exc)


class Held(Protocol):
    """What a heartbeat reads of its completion (``app.completion.relay.Relay``)."""

    service: SettlementTerms
    hold: Hold


class Heartbeat:
    """Extends the reservation's deadline while the stream lives: at most once a third of it."""

    def __init__(self, completion: Held) -> None:
        self.completion = completion
        self.every = completion.service.deadline_s / HEARTBEATS_PER_DEADLINE
        self.next = time.monotonic() + self.every

    async def beat(self) -> None:
        self.next = time.monotonic() + self.every
        service = self.completion.service
        try:
            await service.money.extend(self.completion.hold, service.clock() + service.deadline_s)
        except REDIS_ERRORS as exc:
            raise LedgerUnreachable from exc


class Settling:
    """The settlement of a ``Completion`` (one of its bases, beside ``Relay``): what it
    bills, and the shielded task that closes its hold.

    The attributes declared here are the completion's: its request and hold (set when it
    opens), what the relay counted (``Relay``), and settlement's own two, given their first
    values by ``Completion.__init__`` (no base constructor is called per request)."""

    service: SettlementTerms
    ident: Identity
    params: CompletionRequest
    hold: Hold
    created: int
    started: float
    first_output_at: float
    failovers: int  # the upstreams failed over from before the one that served
    _provider_name: str  # the upstream that served, once connected ("": none yet)
    _upstream_model: str
    _cost: UpstreamCost | None  # what its provider charges (None: not known)
    usage: Usage | None
    tokens_received: int
    _texts: list[str]
    _response_id: str
    _response: RecordedResponse | None
    _settling: asyncio.Task[Settlement] | None  # the settlement, once begun (begin_settle)
    _estimated: int | None  # the output's token estimate, once made (billed_tokens)

    def billed_tokens(self) -> tuple[int, int]:
        """Prompt and completion tokens to bill: the upstream's report, each count clamped
        to 0 .. what the reservation held for (the prompt's bound, the output cap), so
        whatever an upstream reports, the charge stays within the hold; without a report,
        svc's estimates (``app.core.tokens``) of the prompt and of the output relayed (at
        least a token per piece relayed), clamped the same way. With only the counts the
        stream began with (``StartUsage``), the prompt is the upstream's, the output svc's
        estimate."""
        usage = self.usage
        if usage is not None and type(usage) is not StartUsage:
            prompt = min(max(usage.prompt_tokens, 0), self.params.prompt_token_bound)
            completion = min(
                max(usage.completion_tokens, self.tokens_received), self.hold.out_tokens
            )
            return prompt, completion
        if self._estimated is None:  # once: the ending and the settlement both ask
            self._estimated = estimate_tokens("".join(self._texts))
        prompt = self.params.prompt_tokens if usage is None else max(usage.prompt_tokens, 0)
        completion = min(max(self.tokens_received, self._estimated), self.hold.out_tokens)
        return min(prompt, self.params.prompt_token_bound), completion

    @property
    def usage_source(self) -> str:
        """Whose counts were billed: the upstream's, or svc's estimate (of the whole, or of
        the output of a stream that reported only its start)."""
        usage = self.usage
        if usage is None or type(usage) is StartUsage:
            return USAGE_ESTIMATED
        return USAGE_UPSTREAM

    def begin_settle(self, outcome: str) -> asyncio.Task[Settlement]:
        """Start closing the reservation for what was generated, in a task no cancellation
        reaches; the first call decides, later ones return the same task."""
        if self._settling is None:
            self._settling = in_background(self._settle(outcome))
        return self._settling

    async def settle(self, *, outcome: str) -> Settlement:
        """Close the reservation and wait for it (idempotent per completion)."""
        return await asyncio.shield(self.begin_settle(outcome))

    def billed_parts(self, prompt: int, completion: int) -> Tokens:
        """The tokens billed with the parts the upstream's report names, each clamped to
        what it is a part of: cached prompt tokens, prompt tokens written to the provider's
        cache (at most the prompt's uncached rest), reasoning tokens of the completion.
        (settle.lua clamps them the same way again.)"""
        usage = self.usage
        if usage is None:
            return Tokens(prompt, completion)
        prompt_details = usage.prompt_tokens_details or _NONE
        cached = min(max(prompt_details.get("cached_tokens", 0), 0), prompt)
        writes = 0
        for name in CACHE_WRITE_DETAILS:
            writes = max(writes, prompt_details.get(name, 0))
        writes = min(writes, prompt - cached)
        reasoning = (usage.completion_tokens_details or _NONE).get("reasoning_tokens", 0)
        return Tokens(prompt, completion, cached, writes, min(max(reasoning, 0), completion))

    async def _settle(self, outcome: str) -> Settlement:
        tokens = self.billed_parts(*self.billed_tokens())
        cost = self._cost
        # what the provider charges for the tokens billed (a released request: nothing)
        micros = 0 if cost is None or outcome == "released" else cost_micros(cost, tokens)
        settled = await self.service.money.settle(
            self.hold,
            now=self.service.clock(),
            rates=self.params.alias.price.rates,
            tokens=tokens,
            outcome=outcome,
            served=self._served(micros),
            failovers=self.failovers,
            response=self._response,
        )
        if settled.status is ScriptStatus.OK:
            METRICS.settled(
                outcome,
                self.ident.environment,
                self.params.alias.id,
                used=settled.credits_used,
                held=self.hold.amount,
                tokens=None
                if outcome == "released"
                else BilledTokens(
                    tokens.prompt, tokens.completion, tokens.cached, tokens.reasoning
                ),
            )
            if micros and cost is not None:
                alias = self.params.alias.id
                METRICS.upstream_cost(alias, self._provider_name, cost.currency, micros)
        return settled

    def _served(self, upstream_cost: int) -> Served:
        """What the request's activity row tells: its response's id, times, usage source,
        the prices it is settled at (the ``rates`` ``_settle`` sends: its receipt names
        them, whatever the alias costs later), and (operators only) the upstream that
        served and ``upstream_cost``, what it cost in micro-units of its currency."""
        cost = self._cost
        return Served(
            response_id=self._response_id,
            created=self.created,
            ttfb_ms=_ms(self.first_output_at - self.started),
            duration_ms=_ms(time.monotonic() - self.started),
            usage_source=self.usage_source,
            prices=self.params.alias.price.rates,
            provider=self._provider_name,
            upstream_model=self._upstream_model,
            cost_currency="" if cost is None else cost.currency,
            upstream_cost=upstream_cost,
        )


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))
