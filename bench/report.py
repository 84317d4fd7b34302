"""A run's results as JSON, a Markdown table with the targets, and a PNG chart."""

from __future__ import annotations

from pathlib import Path

import msgspec

from bench import beside, goals, replica_run, replicas
from bench.floor import FLOOR
from bench.measures import paired_ratio, rss_at_streams
from bench.orchestrate import (
    BASELINES,
    CLUSTER_TARGET,
    Conservation,
    Point,
    RunReport,
    memory_concurrency,
)
from bench.scale_report import scale_table, scale_targets

# Targets of the bench issue; each is a ratio or a count measured within the same run.
THROUGHPUT_RATIO = 0.30  # svc / direct req/s, fast upstream, C=50
ADDED_TTFB_P50_MS = 0.8  # C=1 (issue 37; 1.0 before)
ADDED_TTFB_P99_MS = 5.0  # C=1
SERVER_CPU_MS = 1.5  # per request
SCRIPT_CALLS = 2.0  # per completion
RSS_MB = 100.0  # per worker, 1,000 slow streams held open on each worker
# tokens (each chunk its own write), C=200
TOKENS_C = 200
TOKENS_THROUGHPUT_RATIO = 0.95  # svc / direct content chunks per second
TOKENS_ADDED_TTFB_P50_MS = 3.0
TOKENS_CPU_US_PER_CHUNK = 40.0
TOKENS_PEER_CPU_SHARE = 2 / 3  # svc's CPU per chunk / Portkey's
RESPONSES_THROUGHPUT_RATIO = 0.9  # POST /v1/responses / chat completions req/s, fast, C=50
MESSAGES_THROUGHPUT_RATIO = 0.9  # POST /v1/messages / chat completions req/s, fast, C=50
# the points that hold streams open rather than measure a rate (the RSS check, the scale
# levels): out of the per-completion targets and the chart
HELD = ("memory", "scale")


def _find(report: RunReport, scenario: str, target: str, concurrency: int) -> Point | None:
    for p in report.points:
        if (p.scenario, p.target, p.load.concurrency) == (scenario, target, concurrency):
            return p
    return None


def _all(report: RunReport, scenario: str, concurrency: int) -> list[Point]:
    return [
        p
        for p in report.points
        if (p.scenario, p.target, p.load.concurrency) == (scenario, "svc", concurrency)
    ]


class Target(msgspec.Struct):
    name: str
    goal: str
    measured: str
    met: bool


def targets(report: RunReport) -> list[Target]:
    """Each target with what this run measured; a target this run could not measure is
    left out (the smoke profile, say, runs no C=50 point)."""
    out: list[Target] = []
    direct50, svc50 = _find(report, "fast", "direct", 50), _find(report, "fast", "svc", 50)
    if direct50 and svc50 and direct50.load.rps:
        ratio = svc50.load.rps / direct50.load.rps
        out.append(
            Target(
                "throughput, fast, C=50",
                f">= {THROUGHPUT_RATIO:.2f} x direct",
                f"{ratio:.3f} x ({svc50.load.rps:,.0f} / {direct50.load.rps:,.0f} req/s)",
                ratio >= THROUGHPUT_RATIO,
            )
        )
    direct1, svc1 = _find(report, "fast", "direct", 1), _find(report, "fast", "svc", 1)
    if direct1 and svc1:
        p50 = svc1.load.ttfb_ms.p50 - direct1.load.ttfb_ms.p50
        p99 = svc1.load.ttfb_ms.p99 - direct1.load.ttfb_ms.p99
        floor1 = _find(report, "fast", FLOOR, 1)
        beside_floor = (
            f" (the floor's {floor1.load.ttfb_ms.p50 - direct1.load.ttfb_ms.p50:.2f} ms)"
            if floor1
            else ""
        )
        out.append(
            Target(
                "added TTFB p50, C=1",
                f"<= {ADDED_TTFB_P50_MS} ms",
                f"{p50:.2f} ms{beside_floor}",
                p50 <= ADDED_TTFB_P50_MS,
            )
        )
        out.append(
            Target(
                "added TTFB p99, C=1",
                f"<= {ADDED_TTFB_P99_MS} ms",
                f"{p99:.2f} ms",
                p99 <= ADDED_TTFB_P99_MS,
            )
        )
    svc_points = [p for p in report.points if p.target == "svc" and p.scenario not in HELD]
    # At C=50 the server is busy; at low load a point's CPU per request is mostly the
    # workers' idle cost spread over few requests (the table shows every point).
    if svc50 and svc50.server_cpu_ms_per_request:
        cpu = svc50.server_cpu_ms_per_request
        out.append(
            Target(
                "server CPU per request, fast, C=50",
                f"<= {SERVER_CPU_MS} ms",
                f"{cpu:.3f} ms",
                cpu <= SERVER_CPU_MS,
            )
        )
    calls = [p.script_calls_per_completion for p in svc_points]
    wire = report.wire_commands_per_completion
    if calls:
        others = {k: v for k, v in wire.items() if k not in ("evalsha", "eval")}
        exact = all(c == SCRIPT_CALLS for c in calls) and not others
        measured = f"{min(c or 0 for c in calls)}-{max(c or 0 for c in calls)} script calls"
        measured += "; other wire commands: " + (
            ", ".join(f"{k} {v}" for k, v in others.items()) or "none"
        )
        out.append(Target("Redis per completion", "exactly 2 script calls", measured, exact))
    memory = _find(report, "memory", "svc", memory_concurrency(report.profile))
    if memory and memory.rss_mb_per_worker:
        out.append(memory_target(memory, report.profile.memory_streams))
    for paired in (responses_target(report), messages_target(report)):
        if paired is not None:
            out.append(paired)
    out += tokens_targets(report)
    out += [Target(g.name, g.goal, g.measured, g.met) for g in scale_targets(report)]
    out += same_run_targets(report)
    out.append(conservation_target("conservation", report.conservation))
    if report.cluster_conservation is not None:
        out.append(
            conservation_target("conservation, 3-primary cluster", report.cluster_conservation)
        )
    if report.replica_conservation is not None:
        out.append(
            conservation_target(
                "conservation, a primary with a replica", report.replica_conservation
            )
        )
    return out


def conservation_target(name: str, c: Conservation) -> Target:
    durable = "not flushed" if c.durable_rollups is None else f"{c.durable_rollups:,}"
    return Target(
        name,
        "zero credits lost or doubled",
        f"decrease {c.balance_decrease:,} = reported {c.credits_reported:,} = usage "
        f"{c.usage_counters:,} = durable {durable}"
        f"; open reservations {c.open_reservations}; failed streams {c.failed_requests}",
        c.ok,
    )


def _labels(report: RunReport) -> dict[str, str]:
    return {name: f"{name} {v}" for name, v in report.peer_versions.items()}


def same_run_targets(report: RunReport) -> list[Target]:
    """Issue 37's targets against the floor and TensorZero (``bench.goals``), where this
    run measured both sides."""
    figures = _figures(report)
    found = goals.floor_goals(figures, FLOOR, _labels(report))
    below = goals.ttfb_below_peer(figures, _labels(report))
    found += [below] if below else []
    return [Target(g.name, g.goal, g.measured, g.met) for g in found]


def responses_target(report: RunReport) -> Target | None:
    """Responses throughput against chat completions (``paired_target``)."""
    concurrency = max(report.profile.responses_concurrency)  # 50 by default
    return paired_target(
        report, "responses", concurrency, "Responses API", RESPONSES_THROUGHPUT_RATIO
    )


def messages_target(report: RunReport) -> Target | None:
    """Messages API throughput (``POST /v1/messages``) against chat completions
    (``paired_target``)."""
    concurrency = max(report.profile.messages_concurrency)  # 50 by default
    return paired_target(report, "messages", concurrency, "Messages API", MESSAGES_THROUGHPUT_RATIO)


def paired_target(
    report: RunReport, scenario: str, concurrency: int, name: str, goal: float
) -> Target | None:
    """A paired scenario's throughput against chat completions: the median of the ratios of
    each of its points to the chat point measured beside it (``measure_pairs``); None when
    the run has no such pair."""
    pairs = list(
        zip(
            _all(report, BASELINES[scenario], concurrency),
            _all(report, scenario, concurrency),
            strict=False,
        )
    )
    median = paired_ratio((chat.load.rps, other.load.rps) for chat, other in pairs)
    if median is None:
        return None
    ratio, counted = median
    each = ", ".join(f"{other.load.rps:,.0f} / {chat.load.rps:,.0f}" for chat, other in pairs)
    return Target(
        f"{name} throughput, fast, C={concurrency}",
        f">= {goal:.1f} x chat completions",
        f"{ratio:.3f} x (median of {counted} alternating pairs: {each} req/s)",
        ratio >= goal,
    )


def memory_target(memory: Point, per_worker: int) -> Target:
    """RSS per worker holding ``per_worker`` slow streams. The kernel spreads the point's
    connections unevenly over the workers (one may hold 1,400 of 2,000), so each worker's
    growth is scaled to ``per_worker`` streams by the most it held at once; without those
    counts, the peak as measured."""
    peaks = memory.rss_mb_per_worker or []
    idle, streams = memory.idle_rss_mb_per_worker, memory.streams_per_worker
    name = f"RSS per worker, {per_worker} slow streams on each"
    if not idle or not streams or len(idle) != len(peaks) or not all(streams):
        worst = max(peaks)
        return Target(name, f"<= {RSS_MB:.0f} MB", f"{worst:.0f} MB", worst <= RSS_MB)
    scaled = [
        rss_at_streams(i, p, n, per_worker) for i, p, n in zip(idle, peaks, streams, strict=True)
    ]
    worst = max(scaled)
    held = "/".join(f"{n:,}" for n in streams)
    raw = "/".join(f"{p:.0f}" for p in peaks)
    return Target(
        name,
        f"<= {RSS_MB:.0f} MB",
        f"{worst:.0f} MB (peaks {raw} MB with {held} streams open)",
        worst <= RSS_MB,
    )


def tokens_targets(report: RunReport) -> list[Target]:
    """The tokens scenario's targets at C=200, each from the same run."""
    out: list[Target] = []
    direct, svc = (
        _find(report, "tokens", "direct", TOKENS_C),
        _find(report, "tokens", "svc", TOKENS_C),
    )
    if not (direct and svc):
        return out
    where = f"tokens, C={TOKENS_C}"
    if direct.load.chunks_per_s:
        ratio = svc.load.chunks_per_s / direct.load.chunks_per_s
        out.append(
            Target(
                f"throughput, {where}",
                f">= {TOKENS_THROUGHPUT_RATIO:.2f} x direct",
                f"{ratio:.3f} x ({svc.load.chunks_per_s:,.0f} / "
                f"{direct.load.chunks_per_s:,.0f} chunks/s)",
                ratio >= TOKENS_THROUGHPUT_RATIO,
            )
        )
    added = svc.load.ttfb_ms.p50 - direct.load.ttfb_ms.p50
    out.append(
        Target(
            f"added TTFB p50, {where}",
            f"<= {TOKENS_ADDED_TTFB_P50_MS:g} ms",
            f"{added:.2f} ms",
            added <= TOKENS_ADDED_TTFB_P50_MS,
        )
    )
    cpu = svc.server_cpu_us_per_chunk
    if cpu is not None:
        out.append(
            Target(
                f"server CPU per relayed chunk, {where}",
                f"<= {TOKENS_CPU_US_PER_CHUNK:g} µs",
                f"{cpu:.1f} µs",
                cpu <= TOKENS_CPU_US_PER_CHUNK,
            )
        )
        portkey = _find(report, "tokens", "portkey", TOKENS_C)
        if portkey and portkey.server_cpu_us_per_chunk:
            share = cpu / portkey.server_cpu_us_per_chunk
            out.append(
                Target(
                    f"CPU per chunk against Portkey, {where}",
                    "<= 2/3 of Portkey's",
                    f"{share:.2f} x ({cpu:.1f} / {portkey.server_cpu_us_per_chunk:.1f} µs)",
                    share <= TOKENS_PEER_CPU_SHARE,
                )
            )
    return out


def tokens_table(report: RunReport) -> list[str]:
    """The tokens points: per-chunk figures, each target beside the direct point of its C."""
    points = [p for p in report.points if p.scenario == "tokens"]
    if not points:
        return []
    prof = report.profile
    lines = [
        "",
        f"Tokens: the upstream writes {prof.tokens_chunks} content chunks "
        f"{prof.tokens_delay_ms} ms apart, each on its own. Server CPU is user+system of the "
        "server's process tree over the point / content chunks relayed (direct: the mock's "
        "own); RSS per stream is (peak RSS during the point - RSS before the first tokens "
        "point) / C.",
        "",
        "| target | C | req/s | chunks/s | x direct | TTFB p50 | added | inter-chunk p50 "
        "| p99 | server CPU µs/chunk | RSS KB/stream | errors |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for p in points:
        load = p.load
        direct = _find(report, "tokens", "direct", load.concurrency)
        ratio = added = ""
        if direct and direct is not p and direct.load.chunks_per_s:
            ratio = f"{load.chunks_per_s / direct.load.chunks_per_s:.3f}"
            added = f"{load.ttfb_ms.p50 - direct.load.ttfb_ms.p50:+.2f}"
        cpu = f"{p.server_cpu_us_per_chunk:.1f}" if p.server_cpu_us_per_chunk else ""
        rss = f"{p.rss_kb_per_stream:.1f}" if p.rss_kb_per_stream is not None else ""
        lines.append(
            f"| {p.target} | {load.concurrency} | {load.rps:,.0f} | {load.chunks_per_s:,.0f} "
            f"| {ratio} | {load.ttfb_ms.p50:.2f} | {added} | {load.inter_chunk_ms.p50:.2f} "
            f"| {load.inter_chunk_ms.p99:.2f} | {cpu} | {rss} | {sum(load.errors.values())} |"
        )
    return lines


def peers_table(report: RunReport) -> list[str]:
    """svc beside every peer that ran (``bench.beside``), then, for a peer that keeps state in
    the bench's Valkey, the Redis commands and CPU it cost per request; then the peers the run
    skipped and why."""
    if not report.peers:
        return beside.skipped_lines(report.skipped_peers)
    labels = _labels(report)
    lines = beside.markdown(beside.rows(_figures(report), report.peers), labels)
    for p in report.points:
        if p.target in report.peers and p.redis_commands_per_request is not None:
            each = ", ".join(f"`{k}` {v:g}" for k, v in p.redis_commands_per_request.items())
            lines.append(
                f"\n{labels.get(p.target, p.target)}, {p.scenario} C={p.load.concurrency}: "
                f"Redis commands per request {each or 'none'} (inside functions and scripts "
                f"included), {p.script_calls_per_completion:g} function or script calls, "
                f"Redis CPU {p.redis_cpu_ms_per_request or 0:.3f} ms per request."
            )
    return lines + beside.skipped_lines(report.skipped_peers)


def _figures(report: RunReport) -> list[beside.Figures]:
    return [
        beside.Figures(
            scenario=p.scenario,
            target=p.target,
            concurrency=p.load.concurrency,
            rps=p.load.rps,
            chunks_per_s=p.load.chunks_per_s,
            ttfb_p50_ms=p.load.ttfb_ms.p50,
            cpu_ms_per_request=p.server_cpu_ms_per_request,
            cpu_us_per_chunk=p.server_cpu_us_per_chunk,
            rss_kb_per_stream=p.rss_kb_per_stream,
            errors=sum(p.load.errors.values()),
        )
        for p in report.points
    ]


def redis_table(report: RunReport) -> list[str]:
    """Redis's own cost per completion at every point that read it (svc's on the single
    Valkey and on the cluster, the floor's, a peer's in the bench's Valkey), then the
    capacity model from this run's figures."""
    points = [p for p in report.points if p.redis is not None and p.scenario != "tokens"]
    if not points:
        return []
    labels = _labels(report)
    lines = [
        "",
        "Redis per completion (request), Δ over the point / its requests: the script or "
        "function calls' own time (`INFO commandstats` usec, what runs inside included), the "
        "main thread's CPU (what one primary is bound by) and the process's (every thread; "
        "`INFO cpu`); svc-cluster: summed over the 3 primaries.",
        "",
        "| upstream | target | C | script calls | script µs | main thread CPU µs "
        "| of which idle | process CPU µs |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for p in points:
        cost = p.redis
        assert cost is not None
        lines.append(
            f"| {p.scenario} | {labels.get(p.target, p.target)} | {p.load.concurrency} "
            f"| {cost.script_calls:g} | {cost.script_us:.1f} | {cost.main_thread_cpu_us:.1f} "
            f"| {_idle(cost.idle_main_thread_cpu_us)} | {cost.process_cpu_us:.1f} |"
        )
    lines += capacity_lines(report)
    return lines


def _idle(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def capacity_lines(report: RunReport) -> list[str]:
    """The capacity model (``bench.goals.capacity``) from the fast point at C=50 (or the
    highest C measured on the cluster), single Valkey against the cluster."""
    cluster = [p for p in report.points if p.target == CLUSTER_TARGET and p.redis]
    c = max((p.load.concurrency for p in cluster), default=goals.REQUEST_AT[1])
    single = _find(report, "fast", "svc", c)
    if single is None or single.redis is None:
        return []
    cost = single.redis
    model = goals.capacity(
        cost.main_thread_cpu_us, cost.script_us, single.server_cpu_ms_per_request
    )
    if model is None:
        return []
    lines = [
        "",
        f"Capacity model, fast C={c}: one primary's main thread spends "
        f"{cost.main_thread_cpu_us:.1f} µs per completion, so it sustains "
        f"{model.per_primary:,.0f} completions/s ({model.per_primary_scripts_only or 0:,.0f} "
        f"if the scripts' own {cost.script_us:.1f} µs were all it did).",
    ]
    if model.per_worker_core and model.cores_per_primary:
        lines[-1] += (
            f" One worker core serves {model.per_worker_core:,.0f} completions/s (svc "
            f"{model.svc_ms_per_request:.3f} ms CPU per request): one primary keeps "
            f"{model.cores_per_primary:.1f} cores of svc busy."
        )
    on_cluster = _find(report, "fast", CLUSTER_TARGET, c)
    if on_cluster and on_cluster.redis and cost.main_thread_cpu_us and cost.script_us:
        other = on_cluster.redis
        lines[-1] += (
            f" On 3 primaries a completion costs {other.main_thread_cpu_us:.1f} µs of main "
            f"thread ({other.main_thread_cpu_us / cost.main_thread_cpu_us:.2f} x one's) and "
            f"{other.script_us:.1f} µs of scripts ({other.script_us / cost.script_us:.2f} x): "
            f"K primaries sustain about K x {model.per_primary:,.0f} completions/s."
        )
        one_idle, k_idle = cost.idle_main_thread_cpu_us, other.idle_main_thread_cpu_us
        if one_idle is not None and k_idle is not None:
            one, k = cost.main_thread_cpu_us - one_idle, other.main_thread_cpu_us - k_idle
            if one > 0:
                lines[-1] += (
                    f" Above what Redis spends idle over the same time: {one:.1f} µs on one, "
                    f"{k:.1f} µs on 3 ({k / one:.2f} x)."
                )
    return lines


def markdown(report: RunReport) -> str:
    """The results table, the targets and the machine, as Markdown."""
    m = report.machine
    lines = [
        f"Run {report.started_at}: {m['cpus']} CPUs ({m['cpu_model']}), {m['memory_gb']} GB, "
        f"Python {m['python']}; svc with {report.profile.workers} granian workers; load "
        f"generator ({report.profile.client}), mock upstream, Valkey and svc on the same machine. "
        f"{report.profile.duration_s:g} s measured after {report.profile.warmup_s:g} s warm-up "
        "per point.",
        "",
        "| upstream | target | C | req/s | TTFB p50 | p90 | p99 | latency p50 | p99 | errors "
        "| server CPU ms/req | RSS MB/worker |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for p in report.points:
        load = p.load
        errors = sum(load.errors.values())
        cpu = f"{p.server_cpu_ms_per_request:.3f}" if p.server_cpu_ms_per_request else ""
        rss = "/".join(f"{x:.0f}" for x in p.rss_mb_per_worker) if p.rss_mb_per_worker else ""
        lines.append(
            f"| {p.scenario} | {p.target} | {load.concurrency} | {load.rps:,.0f} "
            f"| {load.ttfb_ms.p50:.2f} | {load.ttfb_ms.p90:.2f} | {load.ttfb_ms.p99:.2f} "
            f"| {load.latency_ms.p50:.2f} | {load.latency_ms.p99:.2f} | {errors} | {cpu} | {rss} |"
        )
    lines += tokens_table(report)
    lines += scale_table(report)
    lines += peers_table(report)
    lines += redis_table(report)
    lines += replicas.markdown(replica_run.figures(report.points), report.replica_costs)
    lines += ["", "| target | goal | measured | met |", "|---|---|---|---|"]
    for t in targets(report):
        lines.append(f"| {t.name} | {t.goal} | {t.measured} | {'yes' if t.met else '**no**'} |")
    wire = report.wire_commands_per_completion
    if wire:
        lines += [
            "",
            "Redis commands sent over the wire per completion (MONITOR sample): "
            + ", ".join(f"`{k}` {v}" for k, v in wire.items())
            + "; background (sweeper and flusher connections), per second: "
            + (
                ", ".join(f"`{k}` {v}" for k, v in report.background_commands_per_s.items())
                or "none"
            ),
        ]
    by_kind: dict[str, int] = {}
    for p in report.points:
        for kind, count in [*p.load.errors.items(), *p.load.errors_outside_window.items()]:
            by_kind[kind] = by_kind.get(kind, 0) + count
    if by_kind:
        lines += ["", "Errors by kind: " + ", ".join(f"{k}: {v}" for k, v in by_kind.items())]
    return "\n".join(lines) + "\n"


def chart(report: RunReport, path: Path) -> None:
    """Throughput and TTFB p50 of the fast scenario against concurrency, one line per
    target (direct, svc, the floor, each peer); the other scenarios are in the tables."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rps, ax_lat) = plt.subplots(1, 2, figsize=(12, 4.5))
    series: dict[str, list[Point]] = {}
    for p in report.points:
        if p.scenario == "fast":
            series.setdefault(p.target, []).append(p)
    for target, points in series.items():
        points.sort(key=lambda p: p.load.concurrency)
        cs = [p.load.concurrency for p in points]
        style = "-" if target.startswith("svc") else "--" if target == "direct" else ":"
        width = 2.5 if target == "svc" else 1.2
        ax_rps.plot(cs, [p.load.rps for p in points], style, lw=width, marker="o", label=target)
        ax_lat.plot(cs, [p.load.ttfb_ms.p50 for p in points], style, lw=width, marker="o")
    for ax, title, unit in (
        (ax_rps, "Throughput, fast upstream", "requests / s"),
        (ax_lat, "Time to first content byte p50, fast upstream", "ms (log)"),
    ):
        ax.set_xscale("log")
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    ax_lat.set_yscale("log")
    fig.legend(loc="center right", fontsize=8)
    fig.suptitle(f"svc bench {report.started_at}, {report.profile.workers} workers")
    fig.subplots_adjust(left=0.06, right=0.84, wspace=0.25, top=0.86, bottom=0.12)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(report: RunReport, out_dir: Path, *, png: bool = True) -> list[Path]:
    """``bench-results.json``, ``bench-results.md`` and ``bench-results.png`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path, png_path = (
        out_dir / f"bench-results.{ext}" for ext in ("json", "md", "png")
    )
    json_path.write_bytes(msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n")
    md_path.write_text(markdown(report))
    written = [json_path, md_path]
    if png:
        chart(report, png_path)
        written.append(png_path)
    return written
