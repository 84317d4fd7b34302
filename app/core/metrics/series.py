"""The series one request records, bound once per route and alias (``Metrics.stream``,
``Metrics.model``): a request finds a group of them with one dictionary lookup, and builds
no label tuple."""

from __future__ import annotations

from typing import NamedTuple, Protocol

from prometheus_client import Counter, Histogram

from app.core.metrics.labels import ENVIRONMENTS


class Families(Protocol):
    """The metric families the bound series are labelled children of (``Metrics``'s)."""

    requests: Counter
    duration: Histogram
    ttfb: Histogram
    tokens: Counter
    token_details: Counter
    credits: Counter


class StreamMetrics:
    """The series one streamed answer of one alias on one route records, bound once per
    (route, alias) by ``Metrics.stream``: a request looks them up once, not per series."""

    __slots__ = ("answered", "duration", "ttfb")

    def __init__(self, metrics: Families, route: str, model: str) -> None:
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

    def __init__(self, metrics: Families, model: str) -> None:
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
