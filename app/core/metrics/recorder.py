"""``Metrics``: every metric svc records, and ``METRICS``, this process's, which every module
records through."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.core.metrics import workers
from app.core.metrics.labels import (
    BACKGROUND_TASKS,
    ENVIRONMENTS,
    FIRST_TOKEN,
    PURCHASE_EVENTS,
    PURCHASE_RESULTS,
    PURCHASE_STORES,
    REPLICA_WAIT_RESULTS,
    SETTLEMENT_OUTCOMES,
    SPOTLIGHT_NETWORKS,
    SPOTLIGHT_RESULTS,
    WEBHOOK_STATES,
)
from app.core.metrics.series import BilledTokens, ModelMetrics, StreamMetrics

M = TypeVar("M", Counter, Histogram)

# Seconds. Time to first byte is dominated by the upstream; the low buckets resolve svc's
# own share (about a millisecond), the high ones a slow model's first token.
TTFB_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    """Every metric svc records. One instance per process: ``METRICS`` below, which every
    module records through."""

    def __init__(self) -> None:
        self.build()

    def build(self) -> None:
        """(Re)create every metric on the storage prometheus-client uses now."""
        # In multiprocess mode the live values are in the files, not in a registry.
        reg = None if workers.multiprocess_enabled() else CollectorRegistry()
        self.registry = reg
        self.requests = Counter(
            "svc_requests",
            "HTTP requests answered, by route template, status and model alias.",
            ["route", "status", "model"],
            registry=reg,
        )
        self.ttfb = Histogram(
            "svc_time_to_first_byte_seconds",
            "Streams: request start to the first content chunk sent, by route and alias.",
            ["route", "model"],
            buckets=TTFB_BUCKETS,
            registry=reg,
        )
        self.duration = Histogram(
            "svc_request_duration_seconds",
            "Request start to the last byte sent (a whole stream for the streaming routes).",
            ["route", "model"],
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self.tokens = Counter(
            "svc_tokens",
            "Tokens billed, by alias and direction (input: the prompt, output: generated).",
            ["model", "direction"],
            registry=reg,
        )
        self.token_details = Counter(
            "svc_token_details",
            "Parts of the tokens billed the upstream reported: cached_tokens of the input, "
            "reasoning_tokens of the output.",
            ["model", "detail"],
            registry=reg,
        )
        self.credits = Counter(
            "svc_credits",
            "Credits by movement: reserved, settled (charged) and refunded (returned unused).",
            ["movement", "environment", "model"],
            registry=reg,
        )
        self.settlements = Counter(
            "svc_settlements",
            "Reservations closed, by outcome (completed, client_disconnect, upstream_error, "
            "released, shutdown, swept).",
            ["outcome"],
            registry=reg,
        )
        self.upstream_attempts = Counter(
            "svc_upstream_attempts",
            "Upstream attempts to start a stream, by provider and outcome (2xx, 3xx, 4xx, "
            "5xx, timeout, connect_error, stream_error).",
            ["provider", "outcome"],
            registry=reg,
        )
        self.upstream_errors = Counter(
            "svc_upstream_errors",
            "Upstream failures, by provider, phase (first_token: before it, stream: after "
            "it) and outcome.",
            ["provider", "phase", "outcome"],
            registry=reg,
        )
        self.failovers = Counter(
            "svc_upstream_failovers",
            "Requests moved on to an alias's next upstream after one failed.",
            ["model"],
            registry=reg,
        )
        self.open_streams = Gauge(
            "svc_open_streams",
            "Streams being relayed now.",
            registry=reg,
            multiprocess_mode="livesum",
        )
        self.rejections = Counter(
            "svc_rejections",
            "Requests refused before any work, by error code.",
            ["code"],
            registry=reg,
        )
        self.sweeps = Counter(
            "svc_sweeper_runs", "Sweeper passes over the reservation sets.", registry=reg
        )
        self.swept = Counter(
            "svc_sweeper_refunded_reservations",
            "Reservations past their deadline refunded by the sweeper.",
            registry=reg,
        )
        self.swept_credits = Counter(
            "svc_sweeper_refunded_credits",
            "Credits the sweeper returned, by environment (the holds of reservations past "
            "their deadline).",
            ["environment"],
            registry=reg,
        )
        self.flushes = Counter(
            "svc_flusher_batches",
            "Usage event batches committed to the durable store.",
            registry=reg,
        )
        self.flushed_events = Counter(
            "svc_flusher_events",
            "Usage events committed to the durable store.",
            registry=reg,
        )
        self.webhook_attempts = Counter(
            "svc_webhook_attempts",
            "Webhook delivery attempts, by the delivery's state after it (delivered, "
            "pending: to be retried, failed: given up).",
            ["state"],
            registry=reg,
        )
        self.spotlight_callbacks = Counter(
            "svc_spotlight_callbacks",
            "Verified spotlight callbacks, by network (admob, applovin, levelplay, signed) and "
            "result (rewarded, duplicate, daily_limit, account_disabled, intent_used, "
            "invalid_intent, invalid_signature, unavailable).",
            ["network", "result"],
            registry=reg,
        )
        self.purchase_events = Counter(
            "svc_purchase_events",
            "Store payment events (POST /v1/purchases/<store>), by store, the event they "
            "came to (paid, pending, failed, refunded, dispute_opened, dispute_won, "
            "dispute_lost, ignored, refund_reversed, consumption_request, invalid) and result "
            "(applied, duplicate, kept, ignored, unmatched, invalid_signature, unavailable).",
            ["store", "event", "result"],
            registry=reg,
        )
        self.replica_waits = Counter(
            "svc_redis_replica_waits",
            "WAITs for SVC_REDIS_MIN_REPLICAS replicas after a money-in or settle script, by "
            "result (acked: enough replicas have it; short: the wait timed out first).",
            ["result"],
            registry=reg,
        )
        self.upstream_costs = Counter(
            "svc_upstream_cost",
            "What providers charged for settled requests, in micro-units of their currency "
            '(the models file\'s costs: docs/operations.md, "The books"), by alias, provider '
            "and currency.",
            ["model", "provider", "currency"],
            registry=reg,
        )
        self.background_errors = Counter(
            "svc_background_errors",
            "Failed sweeper, flusher or webhook rounds (retried next round), by task.",
            ["task"],
            registry=reg,
        )
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._streams: dict[tuple[str, str], StreamMetrics] = {}
        self._models: dict[str, ModelMetrics] = {}
        self._served: dict[str, Counter] = {}
        self._settlements = {o: self.settlements.labels(o) for o in SETTLEMENT_OUTCOMES}
        for known, label_sets in (
            (self.swept_credits, [(e,) for e in ENVIRONMENTS]),
            (self.background_errors, [(t,) for t in BACKGROUND_TASKS]),
            (self.webhook_attempts, [(s,) for s in WEBHOOK_STATES]),
            (self.replica_waits, [(r,) for r in REPLICA_WAIT_RESULTS]),
            (
                self.spotlight_callbacks,
                [(n, r) for n in SPOTLIGHT_NETWORKS for r in SPOTLIGHT_RESULTS],
            ),
            (
                self.purchase_events,
                [
                    (s, e, r)
                    for s in PURCHASE_STORES
                    for e in PURCHASE_EVENTS
                    for r in PURCHASE_RESULTS
                ],
            ),
        ):
            for label_set in label_sets:
                self.labelled(known, *label_set)

    def labelled(self, metric: M, *values: str) -> M:
        """``metric.labels(*values)``, looked up once per label set."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child  # type: ignore[no-any-return]

    def stream(self, route: str, model: str) -> StreamMetrics:
        """The series of a stream of ``model`` on ``route``, bound on first use."""
        bound = self._streams.get((route, model))
        if bound is None:
            bound = self._streams[route, model] = StreamMetrics(self, route, model)
        return bound

    def model(self, model: str) -> ModelMetrics:
        """The credit and token series of an alias, bound on first use."""
        bound = self._models.get(model)
        if bound is None:
            bound = self._models[model] = ModelMetrics(self, model)
        return bound

    def request_done(self, route: str, status: int, model: str, duration_s: float) -> None:
        """Count one answered request and its duration (a stream's: ``StreamMetrics.done``)."""
        self.labelled(self.requests, route, str(status), model).inc()
        self.labelled(self.duration, route, model).observe(duration_s)

    def reserved(self, environment: str, model: str, credits: int) -> None:
        self.model(model).credits(environment).reserved.inc(credits)

    def settled(
        self,
        outcome: str,
        environment: str,
        model: str,
        *,
        used: int,
        held: int,
        tokens: BilledTokens | None = None,
    ) -> None:
        """One reservation closed: ``used`` of the ``held`` credits charged, the rest back;
        ``tokens``: what its completion was billed for (None: nothing was generated)."""
        child = self._settlements.get(outcome)
        if child is None:
            child = self.labelled(self.settlements, outcome)
        child.inc()
        bound = self.model(model)
        credits = bound.credits(environment)
        if used:
            credits.settled.inc(used)
        if held > used:
            credits.refunded.inc(held - used)
        if tokens is not None:
            bound.billed(tokens)

    def attempt_served(self, provider: str) -> None:
        """An upstream attempt that answered and streamed its first piece."""
        child = self._served.get(provider)
        if child is None:
            child = self._served[provider] = self.upstream_attempts.labels(provider, "2xx")
        child.inc()

    def upstream_failed(self, provider: str, phase: str, outcome: str) -> None:
        """An upstream failure: before the first token (``FIRST_TOKEN``, also an attempt's
        outcome) or mid-stream (``MID_STREAM``)."""
        if phase == FIRST_TOKEN:
            self.labelled(self.upstream_attempts, provider, outcome).inc()
        self.labelled(self.upstream_errors, provider, phase, outcome).inc()

    def failover(self, model: str) -> None:
        self.labelled(self.failovers, model).inc()

    def upstream_costs_known(self, series: Iterable[tuple[str, str, str]]) -> None:
        """Make the cost series of each (alias, provider, currency) the models file prices,
        at 0, so a scrape shows them before their first request."""
        for label_set in series:
            self.labelled(self.upstream_costs, *label_set)

    def upstream_cost(self, model: str, provider: str, currency: str, micros: int) -> None:
        """A settled request's upstream cost, in micro-units of ``currency``."""
        self.labelled(self.upstream_costs, model, provider, currency).inc(micros)


METRICS = Metrics()
"""This process's metrics; every module records through this one object."""


def share_across_workers(path: str) -> None:
    """Keep this process's metrics in ``path``, summed with every other process's there."""
    workers.write_to(path)
    METRICS.build()
