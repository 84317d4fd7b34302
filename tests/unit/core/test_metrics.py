"""Metrics in one process (no shared directory): what each recording call adds up to, and
the series known in advance made at 0."""

from __future__ import annotations

import pytest

from app.core.metrics import (
    BACKGROUND_TASKS,
    ENVIRONMENTS,
    FIRST_TOKEN,
    MID_STREAM,
    SETTLEMENT_OUTCOMES,
    SPOTLIGHT_NETWORKS,
    SPOTLIGHT_RESULTS,
    WEBHOOK_STATES,
    BilledTokens,
    Metrics,
    RedisReadings,
    exposition,
)
from tests.e2e.conftest import Samples, metric_samples


def _samples(text: bytes) -> Samples:
    return metric_samples(text.decode())


async def _no_redis() -> None:
    return None


async def test_requests_are_counted_by_route_status_and_model() -> None:
    metrics = Metrics()
    for _ in range(3):
        metrics.request_done("/v1/chat/completions", 200, "svc-fast", 0.02)
    metrics.request_done("/v1/chat/completions", 401, "", 0.001)
    samples = _samples(await exposition(metrics, _no_redis))
    chat = (("model", "svc-fast"), ("route", "/v1/chat/completions"), ("status", "200"))
    assert samples[("svc_requests_total", chat)] == 3
    denied = (("model", ""), ("route", "/v1/chat/completions"), ("status", "401"))
    assert samples[("svc_requests_total", denied)] == 1
    duration = (("model", "svc-fast"), ("route", "/v1/chat/completions"))
    assert samples[("svc_request_duration_seconds_count", duration)] == 3
    assert samples[("svc_request_duration_seconds_sum", duration)] == pytest.approx(0.06)
    # without Redis the Redis gauges are left out, not reported as zero
    assert not any(name == "svc_open_reservations" for name, _ in samples)


async def test_redis_gauges_are_reported_when_redis_answers() -> None:
    async def read() -> RedisReadings:
        return RedisReadings(
            open_reservations=4,
            reservations_past_deadline=1,
            pending_events=120,
            oldest_event_age_s=1.5,
        )

    samples = _samples(await exposition(Metrics(), read))
    assert samples[("svc_open_reservations", ())] == 4
    assert samples[("svc_reservations_past_deadline", ())] == 1
    assert samples[("svc_usage_stream_pending_events", ())] == 120
    assert samples[("svc_usage_stream_lag_seconds", ())] == 1.5


def test_the_process_id_metrics_files_are_named_by_follows_a_fork() -> None:
    """Shared metrics go to a file per process, named by an id asked of the kernel once per
    process rather than per update: a forked worker must still get its own file."""
    import os

    from app.core.metrics.workers import _process_id

    assert _process_id() == os.getpid()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe and exits
        os.write(write_end, str(_process_id()).encode())
        os._exit(0)
    os.close(write_end)
    reported = int(os.read(read_end, 32))
    os.close(read_end)
    os.waitpid(child, 0)
    assert reported == child
    assert _process_id() == os.getpid()


async def test_label_values_known_in_advance_are_there_at_zero() -> None:
    """A series that has not happened yet is a 0, not a gap: alerts on rate() see it."""
    samples = _samples(await exposition(Metrics(), _no_redis))
    for outcome in SETTLEMENT_OUTCOMES:
        assert samples[("svc_settlements_total", (("outcome", outcome),))] == 0
    for environment in ENVIRONMENTS:
        swept = ("svc_sweeper_refunded_credits_total", (("environment", environment),))
        assert samples[swept] == 0
    for task in BACKGROUND_TASKS:
        assert samples[("svc_background_errors_total", (("task", task),))] == 0
    for state in WEBHOOK_STATES:
        assert samples[("svc_webhook_attempts_total", (("state", state),))] == 0
    callbacks = [labels for name, labels in samples if name == "svc_spotlight_callbacks_total"]
    assert len(callbacks) == len(SPOTLIGHT_NETWORKS) * len(SPOTLIGHT_RESULTS)


async def test_a_stream_records_through_series_bound_once_per_route_and_alias() -> None:
    metrics = Metrics()
    bound = metrics.stream("/v1/responses", "svc-fast")
    assert metrics.stream("/v1/responses", "svc-fast") is bound
    assert metrics.stream("/v1/chat/completions", "svc-fast") is not bound
    bound.ttfb.observe(0.01)
    bound.done(0.5)
    bound.done(0.25)
    samples = _samples(await exposition(metrics, _no_redis))
    route_model = (("model", "svc-fast"), ("route", "/v1/responses"))
    answered = (("model", "svc-fast"), ("route", "/v1/responses"), ("status", "200"))
    assert samples[("svc_requests_total", answered)] == 2
    assert samples[("svc_request_duration_seconds_count", route_model)] == 2
    assert samples[("svc_request_duration_seconds_sum", route_model)] == pytest.approx(0.75)
    assert samples[("svc_time_to_first_byte_seconds_count", route_model)] == 1


async def test_settlements_count_credits_and_tokens_by_alias_and_environment() -> None:
    metrics = Metrics()
    metrics.reserved("live", "svc-fast", 100)
    metrics.reserved("test", "svc-code", 50)
    metrics.settled(
        "completed", "live", "svc-fast", used=30, held=100, tokens=BilledTokens(12, 40, 8, 5)
    )
    metrics.settled("released", "test", "svc-code", used=0, held=50)  # nothing generated
    samples = _samples(await exposition(metrics, _no_redis))

    def credits(movement: str, environment: str, model: str) -> float:
        labels = (("environment", environment), ("model", model), ("movement", movement))
        return samples[("svc_credits_total", labels)]

    assert credits("reserved", "live", "svc-fast") == 100
    assert credits("settled", "live", "svc-fast") == 30
    assert credits("refunded", "live", "svc-fast") == 70
    assert credits("settled", "test", "svc-code") == 0  # made at 0 with the alias's series
    assert credits("refunded", "test", "svc-code") == 50
    assert credits("reserved", "test", "svc-fast") == 0

    def tokens(model: str, direction: str) -> float:
        return samples[("svc_tokens_total", (("direction", direction), ("model", model)))]

    def details(model: str, detail: str) -> float:
        return samples[("svc_token_details_total", (("detail", detail), ("model", model)))]

    assert (tokens("svc-fast", "input"), tokens("svc-fast", "output")) == (12, 40)
    assert (details("svc-fast", "cached_tokens"), details("svc-fast", "reasoning_tokens")) == (8, 5)
    assert (tokens("svc-code", "input"), tokens("svc-code", "output")) == (0, 0)
    assert samples[("svc_settlements_total", (("outcome", "completed"),))] == 1
    assert samples[("svc_settlements_total", (("outcome", "released"),))] == 1


async def test_upstream_failures_are_attempts_and_errors_by_outcome() -> None:
    metrics = Metrics()
    metrics.upstream_failed("openai", FIRST_TOKEN, "5xx")
    metrics.upstream_failed("openai", FIRST_TOKEN, "timeout")
    metrics.attempt_served("openai")
    metrics.attempt_served("openai")
    metrics.upstream_failed("openai", MID_STREAM, "stream_error")
    metrics.failover("svc-fast")
    samples = _samples(await exposition(metrics, _no_redis))

    def attempts(outcome: str) -> float:
        labels = (("outcome", outcome), ("provider", "openai"))
        return samples.get(("svc_upstream_attempts_total", labels), 0)

    def errors(phase: str, outcome: str) -> float:
        labels = (("outcome", outcome), ("phase", phase), ("provider", "openai"))
        return samples.get(("svc_upstream_errors_total", labels), 0)

    assert [attempts(o) for o in ("2xx", "5xx", "timeout", "stream_error")] == [2, 1, 1, 0]
    assert errors(FIRST_TOKEN, "5xx") == errors(FIRST_TOKEN, "timeout") == 1
    assert errors(MID_STREAM, "stream_error") == 1  # mid-stream: an error, not an attempt
    assert samples[("svc_upstream_failovers_total", (("model", "svc-fast"),))] == 1
