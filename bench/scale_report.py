"""The scale levels in the report (``bench.scale_run``): each level's streams straight to the
mock and through svc, side by side, what svc adds over direct, and what the load processes
and the mock did meanwhile; the scale targets (``bench.goals.scale_goal`` and the counts)."""

from __future__ import annotations

from bench import floor, goals
from bench.looplag import LagSummary
from bench.orchestrate import Point, RunReport


def scale_points(report: RunReport) -> list[Point]:
    return [p for p in report.points if p.scenario == "scale"]


def figures(points: list[Point]) -> list[goals.ScaleFigures]:
    return [
        goals.ScaleFigures(
            streams=p.load.concurrency,
            target=p.target,
            inter_chunk_p99_ms=p.load.inter_chunk_ms.p99,
            ttfb_p99_ms=p.load.ttfb_ms.p99,
        )
        for p in points
    ]


def _lag(lag: LagSummary | None) -> str:
    return "" if lag is None else f"{lag.p99:,.0f}"


def _processes(p: Point) -> str:
    """Each load process's CPU share (of a core) and loop lag p99 (ms)."""
    return " · ".join(f"{share:.2f} / {lag.p99:,.0f}" for share, lag in p.load.processes)


def scale_table(report: RunReport) -> list[str]:
    """The scale levels: one instance holding each level's streams, beside the same streams
    straight to the mock."""
    points = scale_points(report)
    if not points:
        return []
    prof = report.profile
    found = figures(points)
    added = {target: goals.scale_added(found, target) for target in ("svc", floor.FLOOR)}
    lines = [
        "",
        f"Scale: one instance ({prof.workers} worker{'s' if prof.workers != 1 else ''}) "
        "holding each level's streams at once, "
        f"each {prof.scale_chunks} content chunks {prof.scale_delay_ms} ms apart, started over "
        "one stream's length; every level straight to the mock (direct), then through the "
        "floor (the bare relay with two Redis round trips a stream; not in every profile), "
        "then on svc started afresh. Added: svc's (the floor's) p99 - direct's. Load "
        "processes: each one's CPU share of a core / its event loop's lag p99 (ms) over the "
        "window; mock lag: the mock's loop lag p99 "
        "(ms). Server CPU per chunk: the process tree's CPU inside the measured window / the "
        "chunks relayed in it (direct: the mock's); RSS per stream: (the workers' peak RSS - "
        "their RSS before the level) / streams.",
        "",
        "| streams | target | load processes: CPU / lag p99 | mock lag p99 | held per worker "
        "| req/s | chunks/s | TTFB p50 | p99 | added | inter-chunk p50 | p99 | added "
        "| server CPU µs/chunk | RSS MB/worker before → peak | RSS KB/stream | errors "
        "| reservations open after |",
        "|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for p in points:
        load = p.load
        held = "/".join(f"{n:,}" for n in p.streams_per_worker or [])
        cpu = f"{p.server_cpu_us_per_chunk:.1f}" if p.server_cpu_us_per_chunk else ""
        before = "/".join(f"{x:.0f}" for x in p.idle_rss_mb_per_worker or [])
        peak = "/".join(f"{x:.0f}" for x in p.rss_mb_per_worker or [])
        rss = f"{before} → {peak}" if before else ""
        per_stream = f"{p.rss_kb_per_stream:.1f}" if p.rss_kb_per_stream is not None else ""
        errors = sum(load.errors.values()) + sum(load.errors_outside_window.values())
        gap, ttfb = (
            (f"{a[0]:+.1f}", f"{a[1]:+.1f}")
            if (a := added.get(p.target, {}).get(load.concurrency))
            else ("", "")
        )
        still = "" if p.reservations_open_after is None else str(p.reservations_open_after)
        lines.append(
            f"| {load.concurrency:,} | {p.target} | {_processes(p)} | {_lag(p.mock_lag)} "
            f"| {held} | {load.rps:,.0f} | {load.chunks_per_s:,.0f} "
            f"| {load.ttfb_ms.p50:.1f} | {load.ttfb_ms.p99:.1f} | {ttfb} "
            f"| {load.inter_chunk_ms.p50:.1f} | {load.inter_chunk_ms.p99:.1f} | {gap} "
            f"| {cpu} | {rss} | {per_stream} | {errors} | {still} |"
        )
    return lines


def scale_targets(report: RunReport) -> list[goals.Goal]:
    """At every scale level through svc: no request failed (warm-up and drain included), and
    no reservation was left open; at the largest, the inter-chunk p99 svc adds over direct
    (``bench.goals.scale_goal``)."""
    points = [p for p in scale_points(report) if p.target == "svc"]
    if not points:
        return []
    levels = "/".join(f"{p.load.concurrency:,}" for p in points)
    errors = [
        sum(p.load.errors.values()) + sum(p.load.errors_outside_window.values()) for p in points
    ]
    still = [p.reservations_open_after for p in points]
    added = goals.scale_goal(figures(scale_points(report)), floor.FLOOR)
    return [
        goals.Goal(
            f"scale: errors at {levels} open streams",
            "0 at each",
            "/".join(str(n) for n in errors),
            not any(errors),
        ),
        goals.Goal(
            f"scale: reservations open after {levels} streams",
            "0 at each (every one settled)",
            "/".join(str(n) for n in still),
            all(n == 0 for n in still),
        ),
        *([added] if added else []),
    ]
