"""Traced completions: the variants of a completion's parts that record OpenTelemetry spans,
chosen once per worker when traces are on (``app.runtime``, ``app.core.tracing``). With
traces off nothing here is imported, and completions run the plain classes.

The spans of one completion, under the span of its request (``app.http.streams``)::

    chat {requested model}   SERVER  the request: gen_ai.* and svc.* (credits, outcome, …)
    ├── reserve              CLIENT  reserve.lua
    ├── upstream {provider}  CLIENT  one per attempt, in order (a failover is the next one);
    │                                 the one that serves lasts until the relay stops reading
    └── settle               CLIENT  settle.lua

Each attempt's request upstream carries the W3C trace context naming its span as the parent.
Nothing is recorded per chunk: what the relay counted is read once, when the completion
settles, and the request's span waits for that settlement.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import msgspec
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue

from app.completion.completion import Completion, CompletionTerms
from app.completion.output import StreamOutput
from app.completion.relay import SendBytes
from app.completion.request import CompletionRequest
from app.completion.service import CompletionService
from app.core.errors import UpstreamError
from app.core.tracing.otel import (
    API,
    ATTEMPT,
    ATTEMPTS,
    CHAT,
    CREDITS_CHARGED,
    CREDITS_RESERVED,
    DB_OPERATION,
    DB_PROCEDURE,
    DB_SYSTEM,
    ENVIRONMENT,
    HTTP_STATUS,
    INPUT_TOKENS,
    MAX_TOKENS,
    OPERATION,
    OUTCOME,
    OUTPUT_TOKENS,
    PROVIDER,
    REFUSAL,
    REPLAY,
    REQUEST_MODEL,
    RESPONSE_ID,
    RESPONSE_MODEL,
    SCRIPT_STATUS,
    SERVER_ADDRESS,
    SERVER_PORT,
    TEMPERATURE,
    TOP_P,
    TTFB_MS,
    USAGE_SOURCE,
    Tracing,
    context_headers,
    failed,
)
from app.credits.ceilings import NO_CEILING
from app.credits.idempotency import AnswerSeal, IdempotencyClaim
from app.credits.money import Money
from app.credits.outcomes import Hold, Identity, Refusal, Replay, ScriptStatus, Settlement
from app.upstream.base import UpstreamCall

Attributes = dict[str, AttributeValue]

FAILED_OUTCOMES = frozenset({"upstream_error", "shutdown"})
"""Settlement outcomes that fail the request's span (``client_disconnect`` is the client's
doing, ``released`` is answered with the error that released it)."""
UNSETTLED = "unsettled"
"""The outcome of a stream Redis failed under before it could be settled (the sweeper
refunds its hold at its deadline)."""


def _script(name: str) -> Attributes:
    return {DB_SYSTEM: "redis", DB_OPERATION: "EVALSHA", DB_PROCEDURE: name}


_RESERVE, _SETTLE = _script("reserve"), _script("settle")


class TracedMoney(Money):
    """The completions' ledger with a span for each script call a completion makes (reserve,
    settle): the same ledger as the one it is made from, whose state it shares."""

    def __init__(self, money: Money, tracing: Tracing) -> None:
        vars(self).update(vars(money))
        self._tracing = tracing

    async def reserve(self, *args: Any, **kwargs: Any) -> Hold | Refusal | Replay:
        with self._tracing.child("reserve", SpanKind.CLIENT, _RESERVE) as span:
            reserved = await super().reserve(*args, **kwargs)
            if isinstance(reserved, Hold):
                span.set_attribute(CREDITS_RESERVED, reserved.amount)
            elif isinstance(reserved, Refusal):
                span.set_attribute(REFUSAL, reserved.status.name.lower())
            else:  # an Idempotency-Key's finished request, sent again
                span.set_attribute(REPLAY, True)
            return reserved

    async def settle(self, *args: Any, **kwargs: Any) -> Settlement:
        with self._tracing.child("settle", SpanKind.CLIENT, _SETTLE) as span:
            settled = await super().settle(*args, **kwargs)
            span.set_attribute(SCRIPT_STATUS, settled.status.name.lower())
            return settled


class TracedCompletion(Completion):
    """A completion that records its upstream attempts as spans, sends each its trace
    context, and tells its request's span what it served and cost."""

    service: TracedCompletionService

    def __init__(
        self,
        service: CompletionTerms,
        ident: Identity,
        params: CompletionRequest,
        hold: Hold,
        *,
        started: float,
        seal: AnswerSeal | None = None,
    ) -> None:
        super().__init__(service, ident, params, hold, started=started, seal=seal)
        # made while its request is served: the current span is the request's
        self._request_span = trace.get_current_span()
        self._request_span.set_attribute(CREDITS_RESERVED, hold.amount)
        self._attempt: Span | None = None
        self._attempt_http = False  # whether the attempt's upstream is an HTTP server
        self._attempts = 0

    def _call(self, provider_name: str, model: str) -> UpstreamCall:
        """Each attempt is a span of the request's; what it sends names it as the parent."""
        self._attempts += 1
        attributes: Attributes = {OPERATION: CHAT, PROVIDER: provider_name, ATTEMPT: self._attempts}
        address = self.service.upstreams.get(provider_name)
        if address is not None:
            attributes[SERVER_ADDRESS], attributes[SERVER_PORT] = address
        self._attempt_http = address is not None
        self._attempt = span = self.service.tracing.tracer.start_span(
            f"upstream {provider_name}",
            trace.set_span_in_context(self._request_span),
            SpanKind.CLIENT,
            attributes,
        )
        call = super()._call(provider_name, model)
        return msgspec.structs.replace(call, headers=context_headers(span), answered=self._answered)

    def _answered(self, status: int) -> None:
        if self._attempt is not None:
            self._attempt.set_attribute(HTTP_STATUS, status)

    def _upstream_failed(self, provider_name: str, phase: str, exc: UpstreamError) -> None:
        super()._upstream_failed(provider_name, phase, exc)
        # a stream that failed mid-way had been answered 200
        self._end_attempt(exc.outcome, served=self.served_by is not None)

    def _end_attempt(self, error: str | None, *, served: bool) -> None:
        span, self._attempt = self._attempt, None
        if span is None:
            return
        if served and self._attempt_http:
            span.set_attribute(HTTP_STATUS, 200)
        if error is not None:
            failed(span, error)
        span.end()

    async def relay(self, send: SendBytes, output: StreamOutput | None = None) -> None:
        await super().relay(send, output)
        settling = self._settling
        if settling is None:
            # Redis failed under the stream: nothing was settled
            self._end_attempt(None, served=True)
            self._record(UNSETTLED, None)
        elif not settling.done():
            # the client left: the request's span ends once the settlement has
            with contextlib.suppress(Exception):
                await asyncio.shield(settling)

    async def _settle(self, outcome: str) -> Settlement:
        # the upstream that served is done with (or, unconnected, one never answered)
        connected = self.served_by is not None
        self._end_attempt(None if connected else "interrupted", served=connected)
        try:
            settled = await super()._settle(outcome)
        except BaseException:
            self._record(outcome, None)
            raise
        self._record(outcome, settled)
        return settled

    def _record(self, outcome: str, settled: Settlement | None) -> None:
        """What the completion served and cost, on its request's span (once it has ended,
        as a cancelled request's has, nothing: the settle span still tells)."""
        span = self._request_span
        if not span.is_recording():
            return
        attributes: Attributes = {OUTCOME: outcome, ATTEMPTS: self._attempts}
        if self._response_id:
            attributes[RESPONSE_ID] = self._response_id
        if self.served_by is not None and outcome != "released":
            prompt, completion = self.billed_tokens()
            attributes[INPUT_TOKENS] = prompt
            attributes[OUTPUT_TOKENS] = completion
            attributes[USAGE_SOURCE] = self.usage_source
            attributes[TTFB_MS] = round((self.first_output_at - self.started) * 1000)
        if settled is not None and settled.status is ScriptStatus.OK:
            attributes[CREDITS_CHARGED] = settled.credits_used
        span.set_attributes(attributes)
        if settled is None:
            failed(span, "ledger_unreachable" if outcome == UNSETTLED else "settlement_failed")
        elif outcome in FAILED_OUTCOMES:
            failed(span, outcome)


class TracedCompletionService(CompletionService):
    """Opens traced completions: the request's span is named for its model and told what
    was asked; the reserve and settle script calls are spans of their own."""

    completion_type = TracedCompletion

    def __init__(
        self, service: CompletionService, tracing: Tracing, base_urls: Mapping[str, str]
    ) -> None:
        """``service``: the plain one it replaces; ``base_urls``: each provider's, by name,
        for its attempts' ``server.address`` and ``server.port`` (never its credentials)."""
        super().__init__(
            TracedMoney(service.money, tracing),
            service.router,
            deadline_s=service.deadline_s,
            recorded_bytes=service.recorded_bytes,
            clock=service.clock,
        )
        self.tracing = tracing
        self.upstreams = {
            name: address for name, url in base_urls.items() if (address := server(url))
        }

    async def open(
        self,
        ident: Identity,
        params: CompletionRequest,
        claim: IdempotencyClaim | None = None,
        *,
        ceiling: int = NO_CEILING,
    ) -> Completion | Replay:
        span = trace.get_current_span()
        if span.is_recording():
            span.update_name(f"{CHAT} {params.requested}")
            span.set_attributes(request_attributes(ident, params))
        return await super().open(ident, params, claim, ceiling=ceiling)


def request_attributes(ident: Identity, params: CompletionRequest) -> Attributes:
    """What a request asked for: the model requested, the alias that serves it (svc-auto's
    choice; the upstream's own model name is never told), the API, the key's environment,
    the output cap the client set and the sampling settings sent upstream."""
    attributes: Attributes = {
        REQUEST_MODEL: params.requested,
        RESPONSE_MODEL: params.alias.id,
        API: params.api,
        ENVIRONMENT: ident.environment,
    }
    if params.max_tokens is not None:
        attributes[MAX_TOKENS] = params.max_tokens
    for name, value in ((TEMPERATURE, params.request.temperature), (TOP_P, params.request.top_p)):
        if isinstance(value, int | float):
            attributes[name] = float(value)
    return attributes


def server(base_url: str) -> tuple[str, int] | None:
    """A provider's host and port (None: a URL without a host or with a broken port)."""
    url = urlsplit(base_url)
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        return None
    return (url.hostname, port) if url.hostname else None
