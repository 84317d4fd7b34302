"""A completion's hold on credits: kept alive while its stream lives (``Heartbeat``), closed
for what was generated (``HoldSettlement``) in a task no cancellation reaches, and the registry of
those tasks that graceful shutdown waits for (``drain_background``).

A heartbeat Redis does not answer ends the stream (``LedgerUnreachable``); a settlement
that fails leaves the hold to the sweeper, which refunds it after its deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

from app.completion.costs import UpstreamCost, cost_micros
from app.completion.hold_calls import HoldCalls
from app.completion.request import CompletionRequest
from app.core.errors import LedgerUnreachable
from app.core.metrics import METRICS, BilledTokens
from app.core.settings import HEARTBEATS_PER_DEADLINE
from app.core.tokens import estimate_tokens
from app.credits.idempotency import RecordedResponse
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

    holds: HoldCalls
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


class Heartbeat:
    """Extends the reservation's deadline while the stream lives: at most once a third of it."""

    __slots__ = ("every", "hold", "next", "service")

    def __init__(self, service: SettlementTerms, hold: Hold) -> None:
        self.service = service
        self.hold = hold
        self.every = service.deadline_s / HEARTBEATS_PER_DEADLINE
        self.next = time.monotonic() + self.every

    async def beat(self) -> None:
        self.next = time.monotonic() + self.every
        service = self.service
        try:
            await service.holds.extend(self.hold, service.clock() + service.deadline_s)
        except REDIS_ERRORS as exc:
            raise LedgerUnreachable from exc


class ServedBy:
    """The upstream that served a completion (``Completion.connect``): its provider, model and
    prices, the candidates failed over from before it, and when its first piece came."""

    __slots__ = ("cost", "failovers", "first_output_at", "model", "provider")

    def __init__(
        self,
        provider: str,
        model: str,
        cost: UpstreamCost | None,
        *,
        failovers: int,
        first_output_at: float,
    ) -> None:
        """``cost``: what its provider charges (None: not known); ``first_output_at``:
        ``time.monotonic()`` when its first piece came (the TTFB)."""
        self.provider = provider
        self.model = model
        self.cost = cost
        self.failovers = failovers
        self.first_output_at = first_output_at


class Relayed(Protocol):
    """What settlement bills of a relay (``app.completion.relay.Relay``) once it has stopped."""

    @property
    def usage(self) -> Usage | None: ...
    @property
    def tokens_received(self) -> int: ...
    @property
    def texts(self) -> Sequence[str]: ...


class NothingRelayed:
    """A completion's relay before it ran (a request released before its stream began)."""

    usage: Usage | None = None
    tokens_received = 0
    texts: Sequence[str] = ()


NOTHING_RELAYED = NothingRelayed()


class HoldSettlement:
    """The settlement of one completion's hold: what it bills for what was relayed (the
    upstream's report, or svc's estimate), and closing the hold for that (``settle``, which
    ``Completion`` runs in a task no cancellation reaches)."""

    __slots__ = ("_estimated", "created", "hold", "ident", "params", "service", "started")

    def __init__(
        self,
        service: SettlementTerms,
        ident: Identity,
        params: CompletionRequest,
        hold: Hold,
        *,
        started: float,
        created: int,
    ) -> None:
        """``started``: the request's start (``time.monotonic()``), and ``created``: its
        output's (the clock's seconds), for its activity row."""
        self.service = service
        self.ident = ident
        self.params = params
        self.hold = hold
        self.started = started
        self.created = created
        self._estimated: int | None = None  # the output's token estimate, once made

    def billed_tokens(self, relayed: Relayed) -> tuple[int, int]:
        """Prompt and completion tokens to bill: the upstream's report, each count clamped
        to 0 .. what the reservation held for (the prompt's bound, the output cap), so
        whatever an upstream reports, the charge stays within the hold; without a report,
        svc's estimates (``app.core.tokens``) of the prompt and of the output relayed (at
        least a token per piece relayed), clamped the same way. With only the counts the
        stream began with (``StartUsage``), the prompt is the upstream's, the output svc's
        estimate."""
        usage = relayed.usage
        if usage is not None and type(usage) is not StartUsage:
            prompt = min(max(usage.prompt_tokens, 0), self.params.prompt_token_bound)
            completion = min(
                max(usage.completion_tokens, relayed.tokens_received), self.hold.out_tokens
            )
            return prompt, completion
        if self._estimated is None:  # once: the ending and the settlement both ask
            self._estimated = estimate_tokens("".join(relayed.texts))
        prompt = self.params.prompt_tokens if usage is None else max(usage.prompt_tokens, 0)
        completion = min(max(relayed.tokens_received, self._estimated), self.hold.out_tokens)
        return min(prompt, self.params.prompt_token_bound), completion

    async def settle(
        self,
        outcome: str,
        relayed: Relayed,
        served_by: ServedBy | None,
        *,
        response_id: str,
        response: RecordedResponse | None,
    ) -> Settlement:
        """Close the hold for what was relayed (``served_by``: the upstream that served,
        None: none did; ``response_id``: the output's, "" before it relayed; ``response``:
        what an Idempotency-Key's record keeps of the stream)."""
        tokens = billed_parts(relayed.usage, *self.billed_tokens(relayed))
        cost = None if served_by is None else served_by.cost
        # what the provider charges for the tokens billed (a released request: nothing)
        micros = 0 if cost is None or outcome == "released" else cost_micros(cost, tokens)
        settled = await self.service.holds.settle(
            self.hold,
            now=self.service.clock(),
            rates=self.params.alias.price.rates,
            tokens=tokens,
            outcome=outcome,
            served=self._served(relayed, served_by, micros, response_id),
            failovers=0 if served_by is None else served_by.failovers,
            response=response,
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
            if micros and served_by is not None and cost is not None:
                alias = self.params.alias.id
                METRICS.upstream_cost(alias, served_by.provider, cost.currency, micros)
        return settled

    def _served(
        self, relayed: Relayed, served_by: ServedBy | None, upstream_cost: int, response_id: str
    ) -> Served:
        """What the request's activity row tells: its response's id, times, usage source,
        the prices it is settled at (the ``rates`` ``settle`` sends: its receipt names
        them, whatever the alias costs later), and (operators only) the upstream that
        served and ``upstream_cost``, what it cost in micro-units of its currency."""
        cost = None if served_by is None else served_by.cost
        first_output_at = self.started if served_by is None else served_by.first_output_at
        return Served(
            response_id=response_id,
            created=self.created,
            ttfb_ms=_ms(first_output_at - self.started),
            duration_ms=_ms(time.monotonic() - self.started),
            usage_source=usage_source(relayed.usage),
            prices=self.params.alias.price.rates,
            provider="" if served_by is None else served_by.provider,
            upstream_model="" if served_by is None else served_by.model,
            cost_currency="" if cost is None else cost.currency,
            upstream_cost=upstream_cost,
        )


def usage_source(usage: Usage | None) -> str:
    """Whose counts were billed: the upstream's, or svc's estimate (of the whole, or of the
    output of a stream that reported only its start)."""
    if usage is None or type(usage) is StartUsage:
        return USAGE_ESTIMATED
    return USAGE_UPSTREAM


def billed_parts(usage: Usage | None, prompt: int, completion: int) -> Tokens:
    """The tokens billed with the parts the upstream's report (``usage``) names, each clamped
    to what it is a part of: cached prompt tokens, prompt tokens written to the provider's
    cache (at most the prompt's uncached rest), reasoning tokens of the completion.
    (settle.lua clamps them the same way again.)"""
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


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))
