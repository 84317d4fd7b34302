"""Traced completions: the watcher of a completion service's requests that records their
OpenTelemetry spans (``CompletionTracing``, a ``CompletionObservers``) and the wrapper of its
ledger calls that records theirs (``TracedHolds``), chosen once per worker when traces are on
(``app.runtime``, ``app.core.tracing``). With traces off nothing here is imported, and
completions are watched by nothing.

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

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue

from app.completion.hold_calls import HoldCalls
from app.completion.observer import AnsweredHook, ObservedCompletion
from app.completion.request import CompletionRequest
from app.completion.service import CompletionService
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
from app.credits.outcomes import Hold, Identity, Refusal, Replay, ScriptStatus, Settlement

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


class TracedHolds:
    """The completions' ledger calls with a span for each script call a completion makes
    (reserve, settle) around the ledger's own; its other calls are the ledger's."""

    def __init__(self, holds: HoldCalls, tracing: Tracing) -> None:
        self.holds = holds
        self._tracing = tracing
        # not traced: the same bound methods, so calling them costs what it did
        self.extend = holds.extend
        self.release_unanswered = holds.release_unanswered

    async def reserve(self, *args: Any, **kwargs: Any) -> Hold | Refusal | Replay:
        with self._tracing.child("reserve", SpanKind.CLIENT, _RESERVE) as span:
            reserved = await self.holds.reserve(*args, **kwargs)
            if isinstance(reserved, Hold):
                span.set_attribute(CREDITS_RESERVED, reserved.amount)
            elif isinstance(reserved, Refusal):
                span.set_attribute(REFUSAL, reserved.status.name.lower())
            else:  # an Idempotency-Key's finished request, sent again
                span.set_attribute(REPLAY, True)
            return reserved

    async def settle(self, *args: Any, **kwargs: Any) -> Settlement:
        with self._tracing.child("settle", SpanKind.CLIENT, _SETTLE) as span:
            settled = await self.holds.settle(*args, **kwargs)
            span.set_attribute(SCRIPT_STATUS, settled.status.name.lower())
            return settled


class CompletionSpans:
    """The spans of one completion (its ``CompletionObserver``): each upstream attempt's,
    a span of the request's whose trace context the attempt sends, and what the completion
    served and cost, told to its request's span."""

    def __init__(self, tracing: CompletionTracing, completion: ObservedCompletion) -> None:
        self._tracing = tracing
        self._completion = completion
        # made while its request is served: the current span is the request's
        self._request_span = trace.get_current_span()
        self._request_span.set_attribute(CREDITS_RESERVED, completion.hold.amount)
        self._attempt: Span | None = None
        self._attempt_http = False  # whether the attempt's upstream is an HTTP server
        self._attempts = 0

    def attempt_started(self, provider_name: str) -> tuple[bytes, AnsweredHook]:
        """Each attempt is a span of the request's; what it sends names it as the parent."""
        self._attempts += 1
        attributes: Attributes = {OPERATION: CHAT, PROVIDER: provider_name, ATTEMPT: self._attempts}
        address = self._tracing.upstreams.get(provider_name)
        if address is not None:
            attributes[SERVER_ADDRESS], attributes[SERVER_PORT] = address
        self._attempt_http = address is not None
        self._attempt = span = self._tracing.tracing.tracer.start_span(
            f"upstream {provider_name}",
            trace.set_span_in_context(self._request_span),
            SpanKind.CLIENT,
            attributes,
        )
        return context_headers(span), self._answered

    def _answered(self, status: int) -> None:
        if self._attempt is not None:
            self._attempt.set_attribute(HTTP_STATUS, status)

    def attempt_failed(self, error: str) -> None:
        # a stream that failed mid-way had been answered 200
        self._end_attempt(error, served=self._completion.served_by is not None)

    def _end_attempt(self, error: str | None, *, served: bool) -> None:
        span, self._attempt = self._attempt, None
        if span is None:
            return
        if served and self._attempt_http:
            span.set_attribute(HTTP_STATUS, 200)
        if error is not None:
            failed(span, error)
        span.end()

    def settling(self) -> None:
        # the upstream that served is done with (or, unconnected, one never answered)
        connected = self._completion.served_by is not None
        self._end_attempt(None if connected else "interrupted", served=connected)

    async def relay_ended(self, settling: asyncio.Task[Settlement] | None) -> None:
        if settling is None:
            # Redis failed under the stream: nothing was settled
            self._end_attempt(None, served=True)
            self.settled(UNSETTLED, None)
        elif not settling.done():
            # the client left: the request's span ends once the settlement has
            with contextlib.suppress(Exception):
                await asyncio.shield(settling)

    def settled(self, outcome: str, settlement: Settlement | None) -> None:
        """What the completion served and cost, on its request's span (once it has ended,
        as a cancelled request's has, nothing: the settle span still tells)."""
        span = self._request_span
        if not span.is_recording():
            return
        completion = self._completion
        attributes: Attributes = {OUTCOME: outcome, ATTEMPTS: self._attempts}
        if completion.response_id:
            attributes[RESPONSE_ID] = completion.response_id
        if completion.served_by is not None and outcome != "released":
            prompt, output = completion.billed_tokens()
            attributes[INPUT_TOKENS] = prompt
            attributes[OUTPUT_TOKENS] = output
            attributes[USAGE_SOURCE] = completion.usage_source
            attributes[TTFB_MS] = round((completion.first_output_at - completion.started) * 1000)
        if settlement is not None and settlement.status is ScriptStatus.OK:
            attributes[CREDITS_CHARGED] = settlement.credits_used
        span.set_attributes(attributes)
        if settlement is None:
            failed(span, "ledger_unreachable" if outcome == UNSETTLED else "settlement_failed")
        elif outcome in FAILED_OUTCOMES:
            failed(span, outcome)


class CompletionTracing:
    """The watcher of a service's requests (its ``CompletionObservers``): a request's span
    is named for its model and told what was asked; each completion's spans are its
    ``CompletionSpans``."""

    def __init__(self, tracing: Tracing, upstreams: Mapping[str, tuple[str, int]]) -> None:
        """``upstreams``: each provider's host and port, by name (``server``)."""
        self.tracing = tracing
        self.upstreams = upstreams

    def opening(self, ident: Identity, params: CompletionRequest) -> None:
        span = trace.get_current_span()
        if span.is_recording():
            span.update_name(f"{CHAT} {params.requested}")
            span.set_attributes(request_attributes(ident, params))

    def observe(self, completion: ObservedCompletion) -> CompletionSpans:
        return CompletionSpans(self, completion)


class TracedCompletionService(CompletionService):
    """The plain service, built with its ledger calls traced (``TracedHolds``) and its
    requests watched by ``CompletionTracing``."""

    def __init__(
        self, service: CompletionService, tracing: Tracing, base_urls: Mapping[str, str]
    ) -> None:
        """``service``: the plain one it replaces; ``base_urls``: each provider's, by name,
        for its attempts' ``server.address`` and ``server.port`` (never its credentials)."""
        self.upstreams = {
            name: address for name, url in base_urls.items() if (address := server(url))
        }
        super().__init__(
            TracedHolds(service.holds, tracing),
            service.router,
            deadline_s=service.deadline_s,
            recorded_bytes=service.recorded_bytes,
            clock=service.clock,
            observers=CompletionTracing(tracing, self.upstreams),
        )


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
