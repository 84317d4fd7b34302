"""Metrics in one process (no shared directory): what each recording call adds up to."""

from __future__ import annotations

import pytest

from app.core.metrics import Metrics, exposition
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
    async def read() -> tuple[int, int, float]:
        return 4, 120, 1.5

    samples = _samples(await exposition(Metrics(), read))
    assert samples[("svc_open_reservations", ())] == 4
    assert samples[("svc_usage_stream_pending_events", ())] == 120
    assert samples[("svc_usage_stream_lag_seconds", ())] == 1.5


def test_the_process_id_metrics_files_are_named_by_follows_a_fork() -> None:
    """Shared metrics go to a file per process, named by an id asked of the kernel once per
    process rather than per update: a forked worker must still get its own file."""
    import os

    from app.core.metrics import _process_id

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
