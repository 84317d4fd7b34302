"""What ``GET /metrics`` answers: every worker's metrics summed, then gauges made at scrape
time by whichever worker answers: what runs (``svc_build_info``: the same in every worker,
so no worker writes it to the shared files) and the numbers that live in Redis (open
reservations, unflushed usage events), read rather than counted."""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Awaitable, Callable, Iterable
from importlib import metadata
from typing import NamedTuple

from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.core.metrics.recorder import Metrics
from app.core.metrics.workers import MULTIPROC_ENV, forget_dead_workers

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class RedisReadings(NamedTuple):
    """What a scrape reads from Redis (``app.ops.gauges.redis_readings``)."""

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


async def exposition(
    metrics: Metrics, read_redis: Callable[[], Awaitable[RedisReadings | None]]
) -> bytes:
    """The text every worker's metrics add up to, plus the build and the Redis gauges."""
    registry = CollectorRegistry()
    if metrics.registry is None:
        path = os.environ[MULTIPROC_ENV]
        forget_dead_workers(path)
        multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
        body = generate_latest(registry)
    else:
        body = generate_latest(metrics.registry)
    gauges = CollectorRegistry()
    gauges.register(BuildInfo())
    gauges.register(RedisGauges(await read_redis()))
    return body + generate_latest(gauges)
