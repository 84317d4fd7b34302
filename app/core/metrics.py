"""Prometheus metrics, shared across granian's worker processes.

Each worker writes its counters and histograms to memory-mapped files in one directory
(prometheus-client's multiprocess mode); whichever worker answers ``GET /metrics`` sums
them. The RSGI entry point (``app.rsgi``) switches its worker over with
``share_across_workers`` before serving; granian forks workers from a process that already
imported this module, so the switch rebuilds the metrics in place. A process that never
switches (tests, admin commands) keeps its metrics in memory.

Recording costs an mmap write (a microsecond or two), so the hot path records every request,
never a chunk: the series a stream writes are bound once per alias (``Metrics.stream``,
``Metrics.model``: a request finds a group of them with one dictionary lookup, and builds
no label tuple), and a stream's tokens are counted when it settles. Numbers that live in
Redis — open reservations, unflushed usage events — are read when scraped instead of
counted, and so is ``svc_build_info`` (what runs: the same in every worker, so no worker
writes it to the shared files). Gauges across workers: ``svc_open_streams`` is summed over
the live workers (``livesum``: a dead worker's streams are dropped at the next scrape); the
others are made at scrape time by whichever worker answers.
"""

from __future__ import annotations

import functools
import glob
import os
import platform
import re
from collections.abc import Awaitable, Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

M = TypeVar("M", Counter, Histogram)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds. Time to first byte is dominated by the upstream; the low buckets resolve svc's
# own share (about a millisecond), the high ones a slow model's first token.
TTFB_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

# The label values known in advance. Their series are made when the metrics are (at 0), so
# a scrape shows every one before it first happens: ``rate()`` and alerts see a 0, not a
# missing series.
ENVIRONMENTS = ("live", "test")
SETTLEMENT_OUTCOMES = (
    "completed",
    "client_disconnect",
    "upstream_error",
    "released",
    "shutdown",
    "swept",
)
BACKGROUND_TASKS = ("sweeper", "flusher", "webhooks", "ledger_repair")
WEBHOOK_STATES = ("delivered", "pending", "failed")
REPLICA_WAIT_RESULTS = ("acked", "short")
SPOTLIGHT_NETWORKS = ("admob", "applovin", "levelplay", "signed")
PURCHASE_STORES = ("stripe", "apple", "google")
PURCHASE_EVENTS = (  # app.purchases.events.EventKind, and a refused signature's
    "paid",
    "pending",
    "failed",
    "refunded",
    "dispute_opened",
    "dispute_won",
    "dispute_lost",
    "ignored",
    "refund_reversed",
    "consumption_request",
    "invalid",
)
PURCHASE_RESULTS = (  # app.purchases.purchases.Result, and the two refusals
    "applied",
    "duplicate",
    "kept",
    "ignored",
    "unmatched",
    "invalid_signature",
    "unavailable",
)
SPOTLIGHT_RESULTS = (
    "rewarded",
    "duplicate",
    "daily_limit",
    "account_disabled",
    "intent_used",
    "invalid_intent",
    "invalid_signature",
    "unavailable",
)
# svc_upstream_errors_total's phases: before the attempt's first token, or after it
FIRST_TOKEN = "first_token"
MID_STREAM = "stream"


def multiprocess_enabled() -> bool:
    """Whether this process writes its metrics to the shared directory."""
    return bool(getattr(values.ValueClass, "_multiprocess", False))


class StreamMetrics:
    """The series one streamed answer of one alias on one route records, bound once per
    (route, alias) by ``Metrics.stream``: a request looks them up once, not per series."""

    __slots__ = ("answered", "duration", "ttfb")

    def __init__(self, metrics: Metrics, route: str, model: str) -> None:
        self.answered = metrics.requests.labels(route, "200", model)
        self.duration = metrics.duration.labels(route, model)
        self.ttfb = metrics.ttfb.labels(route, model)

    def done(self, duration_s: float) -> None:
        """The stream ended (its 200 is counted with its duration)."""
        self.answered.inc()
        self.duration.observe(duration_s)


class CreditSeries(NamedTuple):
    """``svc_credits_total``'s three movements for one alias and environment."""

    reserved: Counter
    settled: Counter
    refunded: Counter


class ModelMetrics:
    """An alias's credits (per environment) and tokens, bound once per alias by
    ``Metrics.model``; its series exist, at 0, from the alias's first request on."""

    __slots__ = ("_counter", "_credits", "_model", "cached", "input", "output", "reasoning")

    def __init__(self, metrics: Metrics, model: str) -> None:
        self.input = metrics.tokens.labels(model, "input")
        self.output = metrics.tokens.labels(model, "output")
        self.cached = metrics.token_details.labels(model, "cached_tokens")
        self.reasoning = metrics.token_details.labels(model, "reasoning_tokens")
        self._counter = metrics.credits
        self._model = model
        self._credits = {environment: self._series(environment) for environment in ENVIRONMENTS}

    def credits(self, environment: str) -> CreditSeries:
        series = self._credits.get(environment)
        if series is None:
            series = self._credits[environment] = self._series(environment)
        return series

    def _series(self, environment: str) -> CreditSeries:
        credits, model = self._counter, self._model
        return CreditSeries(
            reserved=credits.labels("reserved", environment, model),
            settled=credits.labels("settled", environment, model),
            refunded=credits.labels("refunded", environment, model),
        )

    def billed(self, tokens: BilledTokens) -> None:
        """One completion's tokens (a 0 writes nothing)."""
        if tokens.input:
            self.input.inc(tokens.input)
        if tokens.output:
            self.output.inc(tokens.output)
        if tokens.cached:
            self.cached.inc(tokens.cached)
        if tokens.reasoning:
            self.reasoning.inc(tokens.reasoning)


class BilledTokens(NamedTuple):
    """The tokens a settled completion was billed for, and the parts of them its upstream
    reported as cached (of the input) and as reasoning (of the output)."""

    input: int
    output: int
    cached: int = 0
    reasoning: int = 0


class Metrics:
    """Every metric svc records. One instance per process: ``METRICS`` below, which every
    module records through."""

    def __init__(self) -> None:
        self.build()

    def build(self) -> None:
        """(Re)create every metric on the storage prometheus-client uses now."""
        # In multiprocess mode the live values are in the files, not in a registry.
        reg = None if multiprocess_enabled() else CollectorRegistry()
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


class RedisReadings(NamedTuple):
    """What a scrape reads from Redis (``app.http.metrics.redis_gauges``)."""

    open_reservations: int  # not yet settled, over every shard
    reservations_past_deadline: int  # of those, the ones the sweeper should have refunded
    pending_events: int  # usage events in the streams, not yet flushed to the store
    oldest_event_age_s: float  # the oldest of them (0 when none)


class RedisGauges(Collector):
    """Gauges read from Redis at scrape time: open reservations, those past their deadline,
    and unflushed usage events. ``None`` when Redis does not answer: the gauges are then
    left out of that scrape."""

    def __init__(self, readings: RedisReadings | None) -> None:
        self.readings = readings

    def collect(self) -> Iterable[Metric]:
        read = self.readings
        if read is None:
            return
        yield GaugeMetricFamily(
            "svc_open_reservations",
            "Reservations not yet settled, over every shard.",
            read.open_reservations,
        )
        yield GaugeMetricFamily(
            "svc_reservations_past_deadline",
            "Open reservations whose deadline has passed (the sweeper's to refund), over every "
            "shard.",
            read.reservations_past_deadline,
        )
        yield GaugeMetricFamily(
            "svc_usage_stream_pending_events",
            "Usage events in the Redis streams not yet flushed to the durable store.",
            read.pending_events,
        )
        yield GaugeMetricFamily(
            "svc_usage_stream_lag_seconds",
            "Age of the oldest unflushed usage event (0 when none).",
            read.oldest_event_age_s,
        )


def installed_version(distribution: str = "svc") -> str:
    """The version of an installed distribution (``svc --version``, ``svc_build_info``);
    ``unknown`` when it is not installed (the source tree run as it is)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def build_labels() -> tuple[tuple[str, str], ...]:
    """``svc_build_info``'s labels: svc's, Python's and granian's versions (read from the
    installed packages' metadata: granian is not imported)."""
    return (
        ("version", installed_version()),
        ("python", platform.python_version()),
        ("granian", installed_version("granian")),
    )


class BuildInfo(Collector):
    """``svc_build_info``: always 1, its labels say what runs (one series per build)."""

    def collect(self) -> Iterable[Metric]:
        labels = build_labels()
        family = GaugeMetricFamily(
            "svc_build_info",
            "What runs: svc's, Python's and granian's versions (always 1).",
            labels=[name for name, _ in labels],
        )
        family.add_metric([value for _, value in labels], 1)
        yield family


_PID_FILE = re.compile(r"gauge_live\w+?_(\d+)\.db$")


def _forget_dead_workers(path: str) -> None:
    """Drop the live gauges of workers that are gone (a crashed worker's open streams)."""
    for name in glob.glob(os.path.join(path, "gauge_live*_*.db")):
        match = _PID_FILE.search(name)
        if match is None:
            continue
        pid = int(match.group(1))
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]
        except PermissionError:
            pass  # alive, owned by someone else


async def exposition(
    metrics: Metrics, read_redis: Callable[[], Awaitable[RedisReadings | None]]
) -> bytes:
    """The text every worker's metrics add up to, plus the build and the Redis gauges."""
    registry = CollectorRegistry()
    if metrics.registry is None:
        path = os.environ[MULTIPROC_ENV]
        _forget_dead_workers(path)
        multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
        body = generate_latest(registry)
    else:
        body = generate_latest(metrics.registry)
    gauges = CollectorRegistry()
    gauges.register(BuildInfo())
    gauges.register(RedisGauges(await read_redis()))
    return body + generate_latest(gauges)


METRICS = Metrics()
"""This process's metrics; every module records through this one object."""


def share_across_workers(path: str) -> None:
    """Keep this process's metrics in ``path``, summed with every other process's there."""
    Path(path).mkdir(parents=True, exist_ok=True)
    os.environ[MULTIPROC_ENV] = path
    values.ValueClass = values.MultiProcessValue(process_identifier=_process_id)  # type: ignore[no-untyped-call]
    METRICS.build()


class _ProcessId:
    """This process's id, asked of the kernel once per process instead of on every metric
    update (prometheus-client checks it each time, to notice a fork): a fork updates it."""

    value = os.getpid()

    @classmethod
    def refresh(cls) -> None:
        cls.value = os.getpid()


os.register_at_fork(after_in_child=_ProcessId.refresh)


def _process_id() -> int:
    return _ProcessId.value
