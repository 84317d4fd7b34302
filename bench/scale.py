"""Scale: one svc instance (the profile's workers) holding thousands of open slow streams at
once (issue 37): RSS per open stream, server CPU per relayed chunk at each level, no errors,
and every reservation settled afterwards.

Each level runs on svc started afresh (its RSS before the first stream is the level's
baseline), with each worker allowed every stream of the level at once (granian's
backpressure, ``SVC_WORKER_STREAMS``: the kernel spreads connections unevenly). A stream is
``chunks`` content chunks ``delay_ms`` apart; the load generator's streams start spread over
one stream's length at most (``START_RATE`` a second), so that from then on they end, and
start again, at that pace rather than in one burst. The CPU per chunk is
the server's CPU inside the measured window (interpolated from samples taken every half
second) over the chunks the window relayed, so neither the ramp nor the drain counts.

Nothing here starts anything (``bench.orchestrate`` does), so that tests can import it.
"""

from __future__ import annotations

import bisect
import math
import resource

import msgspec

WINDOW_S = 20.0  # measured seconds at each level, once every stream is open
# streams started a second while a level ramps up: far below what one instance opens (about
# 2,500 fast streams a second on 2 cores), so the ramp measures holding, not opening
START_RATE = 500.0
SETTLE_S = 2.0  # after the ramp, before the window: the first streams' restarts under way
# the most of a level's streams one worker is counted on to hold: the kernel spreads the
# connections unevenly (up to 70 % on one of two workers seen), two sockets each
WORKER_SHARE = 0.75


class LevelPlan(msgspec.Struct, frozen=True):
    """How one level's load is shaped, in seconds."""

    streams: int
    ramp_s: float  # the streams start spread over this long: one stream's length at most
    warmup_s: float  # before the window: the ramp and SETTLE_S
    duration_s: float
    timeout_s: float  # per request: a stream's length and room for a slow start


def plan(streams: int, chunks: int, delay_ms: int, duration_s: float = WINDOW_S) -> LevelPlan:
    stream_s = chunks * delay_ms / 1000
    ramp_s = min(stream_s, streams / START_RATE)
    return LevelPlan(
        streams=streams,
        ramp_s=ramp_s,
        warmup_s=ramp_s + SETTLE_S,
        duration_s=duration_s,
        timeout_s=stream_s + 60,
    )


def fd_limit(streams: int) -> str | None:
    """Raise this process's open-files limit to its hard limit (the processes it starts
    inherit it); why ``streams`` open streams cannot be held here, or None. The load
    generator and the mock hold one socket per stream, a worker two (its client's and the
    upstream's) for its share."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = math.ceil(2 * WORKER_SHARE * streams) + 1024
    if hard != resource.RLIM_INFINITY and hard < wanted:
        return f"{streams} streams need {wanted} open files, the hard limit is {hard}"
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return None


class CpuSamples:
    """A process tree's CPU seconds, sampled at wall-clock times, read between any two
    times by linear interpolation."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.cpu_s: list[float] = []

    def add(self, at: float, cpu_s: float) -> None:
        self.times.append(at)
        self.cpu_s.append(cpu_s)

    def at(self, when: float) -> float | None:
        """The CPU seconds at ``when``; None outside the samples."""
        if not self.times or not self.times[0] <= when <= self.times[-1]:
            return None
        i = bisect.bisect_left(self.times, when)
        if self.times[i] == when:
            return self.cpu_s[i]
        t0, t1 = self.times[i - 1], self.times[i]
        c0, c1 = self.cpu_s[i - 1], self.cpu_s[i]
        return c0 + (c1 - c0) * (when - t0) / (t1 - t0)

    def between(self, start: float, end: float) -> float | None:
        first, last = self.at(start), self.at(end)
        return None if first is None or last is None else last - first


def us_per_chunk(cpu_s: float | None, chunks_per_s: float, window_s: float) -> float | None:
    """CPU per relayed chunk over a window: its CPU over the chunks relayed in it (the
    window's steady rate, from the streams that ended in it, times its length)."""
    chunks = chunks_per_s * window_s
    if cpu_s is None or chunks <= 0:
        return None
    return round(cpu_s * 1e6 / chunks, 1)


def kb_per_stream(idle_mb: list[float], peak_mb: list[float], streams: int) -> float | None:
    """(Σ the workers' peak RSS − Σ their RSS before the level) / open streams, in KiB."""
    if streams <= 0 or not idle_mb or len(idle_mb) != len(peak_mb):
        return None
    return round((sum(peak_mb) - sum(idle_mb)) * 1024 / streams, 1)
