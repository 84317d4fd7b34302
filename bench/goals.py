"""Issue 37's same-run targets, from plain figures (``bench.beside.Figures``), so that tests can
check them without a run; the report prints them with the rest of its targets.

- CPU per relayed chunk (tokens, C=200) at most 1.1 × the floor's (``bench.floor``: the bare
  relay with two Redis round trips per request), and at most 1.1 × TensorZero's when it ran;
- CPU per request (fast, C=50) at most 1.25 × the floor's;
- added TTFB p50 below TensorZero's at every scenario and concurrency at which it ran;

and issue 53's: at the largest scale level (10,000 open streams by default) the inter-chunk
p99 svc adds over the same streams straight to the mock, in the same run, at most 100 ms.

And the capacity model of bench/README.md: what one Redis primary, K primaries and one worker
core serve, from Redis's cost per completion and svc's CPU per request.
"""

from __future__ import annotations

import math

import msgspec

from bench.beside import Figures

CHUNK_FLOOR_RATIO = 1.1  # svc's CPU per relayed chunk / the floor's (tokens)
CHUNK_PEER_RATIO = 1.1  # svc's CPU per relayed chunk / TensorZero's (tokens)
REQUEST_FLOOR_RATIO = 1.25  # svc's CPU per request / the floor's (fast)
CHUNK_AT = ("tokens", 200)
REQUEST_AT = ("fast", 50)
TTFB_PEER = "tensorzero"
SCALE_ADDED_MS = 100.0  # svc's inter-chunk p99 - direct's, the largest scale level


class Goal(msgspec.Struct, frozen=True):
    name: str
    goal: str
    measured: str
    met: bool


def _find(points: list[Figures], scenario: str, target: str, c: int) -> Figures | None:
    for f in points:
        if (f.scenario, f.target, f.concurrency) == (scenario, target, c):
            return f
    return None


def _ratio_goal(
    name: str, what: str, svc: float | None, base: float | None, goal: float, unit: str
) -> Goal | None:
    if svc is None or not base:
        return None
    ratio = svc / base
    return Goal(
        name,
        f"<= {goal:g} x {what}",
        f"{ratio:.2f} x ({svc:.3g} / {base:.3g} {unit})",
        ratio <= goal,
    )


def floor_goals(points: list[Figures], floor: str, peer_labels: dict[str, str]) -> list[Goal]:
    """The CPU targets against the floor (target name ``floor``) and TensorZero, each where
    this run measured both sides; ``peer_labels`` names a peer in the text."""
    out: list[Goal] = []
    scenario, c = CHUNK_AT
    svc = _find(points, scenario, "svc", c)
    base = _find(points, scenario, floor, c)
    if svc and base:
        found = _ratio_goal(
            f"CPU per relayed chunk against the floor, {scenario}, C={c}",
            "the floor's (bare relay + 2 Redis round trips)",
            svc.cpu_us_per_chunk,
            base.cpu_us_per_chunk,
            CHUNK_FLOOR_RATIO,
            "µs",
        )
        out += [found] if found else []
    peer = _find(points, scenario, TTFB_PEER, c)
    if svc and peer:
        label = peer_labels.get(TTFB_PEER, TTFB_PEER)
        found = _ratio_goal(
            f"CPU per relayed chunk against {label}, {scenario}, C={c}",
            f"{label}'s",
            svc.cpu_us_per_chunk,
            peer.cpu_us_per_chunk,
            CHUNK_PEER_RATIO,
            "µs",
        )
        out += [found] if found else []
    scenario, c = REQUEST_AT
    svc, base = _find(points, scenario, "svc", c), _find(points, scenario, floor, c)
    if svc and base:
        found = _ratio_goal(
            f"CPU per request against the floor, {scenario}, C={c}",
            "the floor's (bare relay + 2 Redis round trips)",
            svc.cpu_ms_per_request,
            base.cpu_ms_per_request,
            REQUEST_FLOOR_RATIO,
            "ms",
        )
        out += [found] if found else []
    return out


def added_ttfb(points: list[Figures], target: str) -> dict[tuple[str, int], float]:
    """A target's added TTFB p50 (its p50 − direct's) at each (scenario, C) it ran, in
    the order of the points."""
    out = {}
    for f in points:
        if f.target != target:
            continue
        direct = _find(points, f.scenario, "direct", f.concurrency)
        if direct is not None:
            out[(f.scenario, f.concurrency)] = f.ttfb_p50_ms - direct.ttfb_p50_ms
    return out


def ttfb_below_peer(points: list[Figures], peer_labels: dict[str, str]) -> Goal | None:
    """svc's added TTFB p50 below TensorZero's at every scenario and concurrency at which
    both ran; None when TensorZero did not run."""
    theirs = added_ttfb(points, TTFB_PEER)
    ours = added_ttfb(points, "svc")
    both = [place for place in theirs if place in ours]
    if not both:
        return None
    label = peer_labels.get(TTFB_PEER, TTFB_PEER)
    missed = [p for p in both if ours[p] >= theirs[p]]
    each = "; ".join(f"{s} C={c} {ours[(s, c)]:+.2f} / {theirs[(s, c)]:+.2f}" for s, c in both)
    return Goal(
        f"added TTFB p50 against {label}, every point it ran",
        f"below {label}'s at each",
        f"svc / {label}: {each} ms" + (f" ({len(missed)} missed)" if missed else ""),
        not missed,
    )


class ScaleFigures(msgspec.Struct, frozen=True, kw_only=True):
    """What the scale target reads of one level's side (``bench.scale_run``)."""

    streams: int
    target: str  # "direct" | "floor" | "svc"
    inter_chunk_p99_ms: float
    ttfb_p99_ms: float


def scale_added(points: list[ScaleFigures], target: str = "svc") -> dict[int, tuple[float, float]]:
    """``target``'s inter-chunk p99 and TTFB p99 minus direct's, in ms, at each level where
    both sides ran, by streams."""
    direct = {f.streams: f for f in points if f.target == "direct"}
    return {
        f.streams: (
            f.inter_chunk_p99_ms - direct[f.streams].inter_chunk_p99_ms,
            f.ttfb_p99_ms - direct[f.streams].ttfb_p99_ms,
        )
        for f in points
        if f.target == target and f.streams in direct
    }


def scale_goal(points: list[ScaleFigures], floor: str | None = None) -> Goal | None:
    """The inter-chunk p99 svc adds over direct at the largest level both sides ran (the TTFB
    p99 it adds beside it, not held to a goal, and what the floor, target name ``floor``,
    adds at that level when it ran: the share of the stack under svc); None when no level
    ran both."""
    added = scale_added(points)
    if not added:
        return None
    streams = max(added)
    gap, ttfb = added[streams]
    svc = next(f for f in points if (f.streams, f.target) == (streams, "svc"))
    under = scale_added(points, floor).get(streams) if floor else None
    floor_said = "" if under is None else f"; the floor adds {under[0]:+.1f} / {under[1]:+.1f} ms"
    return Goal(
        f"scale: inter-chunk p99 svc adds over direct, {streams:,} streams",
        f"<= {SCALE_ADDED_MS:g} ms",
        f"{gap:+.1f} ms ({svc.inter_chunk_p99_ms:,.1f} ms, direct "
        f"{svc.inter_chunk_p99_ms - gap:,.1f}); TTFB p99 {ttfb:+.1f} ms{floor_said}",
        gap <= SCALE_ADDED_MS,
    )


class Capacity(msgspec.Struct, frozen=True, kw_only=True):
    """What one Redis primary and one worker core serve, in completions per second."""

    redis_us_per_completion: float  # the primary's main-thread CPU per completion
    per_primary: float  # 1 s of one primary's main thread / its µs per completion
    script_us_per_completion: float | None  # the scripts' own time (INFO commandstats)
    per_primary_scripts_only: float | None  # the bound if the scripts were all it did
    svc_ms_per_request: float | None  # svc's CPU per request (workers and main process)
    per_worker_core: float | None  # 1 s of one core / svc's CPU per request
    cores_per_primary: float | None  # worker cores one primary keeps busy


def capacity(
    redis_us: float, script_us: float | None = None, svc_ms: float | None = None
) -> Capacity | None:
    """The capacity model from one run's figures (None without a Redis cost)."""
    if redis_us <= 0:
        return None
    per_primary = 1e6 / redis_us
    per_core = 1e3 / svc_ms if svc_ms else None
    return Capacity(
        redis_us_per_completion=redis_us,
        per_primary=per_primary,
        script_us_per_completion=script_us,
        per_primary_scripts_only=1e6 / script_us if script_us else None,
        svc_ms_per_request=svc_ms,
        per_worker_core=per_core,
        cores_per_primary=per_primary / per_core if per_core else None,
    )


def primaries_for(completions_per_s: float, per_primary: float) -> int:
    """Primaries a cluster needs for ``completions_per_s``, when a completion costs the same
    on every primary count (the run checks it: Redis CPU per completion on 1 and K)."""
    return max(1, math.ceil(completions_per_s / per_primary))
