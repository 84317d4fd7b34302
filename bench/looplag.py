"""An event loop's lag, measured from inside it: a task that sleeps a fixed interval over and
over and records how late each wake-up came. A loop busy with other callbacks (or stopped
by the garbage collector) wakes it late by as much as it delays every other timer and read
on that loop, so the lag is what the loop's own scheduling adds to whatever it relays.

Used by the load generator (each process reports its own) and by the mock upstream (read
through ``GET /_lag``), so that a scale level can tell which side fell behind.

Both hold thousands of streams' objects at once, and CPython's full collection walks all of
them: at 10,000 streams a single one stopped the load generator's loop for over a second and
the mock's for 0.6 s (bench/README.md, "Scale: open streams"), a lag that a scale level then
counted as the server's. So neither runs one while it serves: ``no_full_collections``.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable

import msgspec

INTERVAL_S = 0.05  # a wake-up every 50 ms: 20 a second, nothing next to thousands of streams


class LagSummary(msgspec.Struct, frozen=True):
    """Wake-ups' lateness over some span, in milliseconds, and the collector's pauses."""

    samples: int
    p50: float
    p99: float
    max: float
    gc_pauses: int = 0  # collections of the oldest generation in the span
    gc_max_ms: float = 0.0  # the longest collection of any generation


class LagProbe:
    """Records each wake-up's lateness with its wall-clock time (``time.time()``), and the
    garbage collector's pauses, so a span (a measured window) can be read afterwards."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.at: list[float] = []
        self.lag_ms: list[float] = []
        self.gcs: list[tuple[float, int, float]] = []  # (wall time, generation, ms)
        self._gc_started = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    async def _run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            late = (time.perf_counter() - before - self.interval_s) * 1000
            self.at.append(time.time())
            self.lag_ms.append(max(0.0, late))

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        took = (time.perf_counter() - self._gc_started) * 1000
        self.gcs.append((time.time(), info.get("generation", 0), took))

    def between(self, start: float = 0.0, end: float = float("inf")) -> LagSummary:
        lags = [lag for at, lag in zip(self.at, self.lag_ms, strict=True) if start <= at <= end]
        gcs = [(gen, ms) for at, gen, ms in self.gcs if start <= at <= end]
        return summarise(
            lags,
            gc_pauses=sum(1 for gen, _ in gcs if gen == 2),
            gc_max_ms=max((ms for _, ms in gcs), default=0.0),
        )


def summarise(lags: list[float], gc_pauses: int = 0, gc_max_ms: float = 0.0) -> LagSummary:
    """Nearest-rank percentiles of lags (any order): enough for a few hundred wake-ups, and
    the same rule whether one process's lags are read or several processes' merged."""
    ordered = sorted(lags)
    if not ordered:
        return LagSummary(0, 0.0, 0.0, 0.0, gc_pauses, round(gc_max_ms, 2))

    def rank(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return LagSummary(
        len(ordered), rank(0.5), rank(0.99), round(ordered[-1], 2), gc_pauses, round(gc_max_ms, 2)
    )


IDLE_COLLECT_S = 5.0  # the mock collects fully when idle, at most this often


def no_full_collections() -> None:
    """Freeze what start-up made (the collector never walks it again) and leave young
    collections on, with the full ones off: a bench process's cycles die young (parsed
    requests, exceptions), and a long-lived one collects fully only when idle
    (``collect_when_idle``)."""
    gc.freeze()
    gen0, gen1, _ = gc.get_threshold()
    gc.set_threshold(gen0, gen1, 1 << 30)  # full collections: never on their own


async def collect_when_idle(idle: Callable[[], bool], every_s: float = IDLE_COLLECT_S) -> None:
    """A full collection now and then, only while ``idle()`` (no stream in flight), so that
    a long-lived process (the mock, for a whole run) does not keep its old garbage."""
    while True:
        await asyncio.sleep(every_s)
        if idle():
            gc.collect()


def lag_answer(probe: LagProbe | None, path: str) -> bytes:
    """A server's answer to ``GET /_lag?start=S&end=E`` (wall-clock seconds, each optional):
    its probe's summary over that span, as JSON (``null`` without a probe)."""
    if probe is None:
        return b"null"
    query = dict(part.split("=", 1) for part in path.partition("?")[2].split("&") if "=" in part)
    start = float(query.get("start", 0.0))
    end = float(query.get("end", "inf"))
    return msgspec.json.encode(probe.between(start, end))


def read_lag(base_url: str, start: float, end: float) -> LagSummary | None:
    """A server's loop lag over ``start``-``end`` (its ``GET /_lag``; ``base_url`` ends in
    /v1), or None when it keeps none."""
    import httpx

    root = base_url.removesuffix("/v1")
    answer = httpx.get(f"{root}/_lag?start={start}&end={end}", timeout=10)
    answer.raise_for_status()
    return msgspec.json.decode(answer.content, type=LagSummary | None)
