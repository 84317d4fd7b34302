"""What ``SVC_REDIS_MIN_REPLICAS=1`` costs per completion (issue 48): the plan of the points,
svc's count of its replica waits from ``/metrics``, the cost of the setting as same-run
ratios and the report's section on them, from plain figures so that tests can check them
without a run (``bench.replica_run`` measures the points).

svc is measured on one Valkey primary with one replica (``bench.valkey_replica``), the fast
scenario, started once with ``SVC_REDIS_MIN_REPLICAS=0`` and once with ``=1`` on the same two
servers. With 1, every settle is followed by a ``WAIT 1 <ms>`` on the connection the settle
went on (a burst of pipelined settles shares one), and svc counts how each wait ended in
``svc_redis_replica_waits_total{result}`` (``acked``, or ``short``: fewer replicas than asked
had the write when the wait ended).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

SETTINGS = (0, 1)
"""The values of ``SVC_REDIS_MIN_REPLICAS`` measured: without a wait, and with one replica."""
WAITS_METRIC = "svc_redis_replica_waits_total"
_RESULT = re.compile(r'result="([^"]*)"')


def target(min_replicas: int) -> str:
    """The target name of svc's points with ``SVC_REDIS_MIN_REPLICAS=min_replicas``."""
    return f"svc-min-replicas-{min_replicas}"


def order(concurrencies: Sequence[int]) -> list[tuple[int, int]]:
    """The points, as (``SVC_REDIS_MIN_REPLICAS``, concurrency), in the order they are
    measured: both settings at each concurrency, 0 first at the first, 1 first at the next,
    and so on (A/B/B/A), so that the machine's drift over the run favours neither setting.
    Consecutive points of one setting share a start of svc."""
    out = []
    for i, concurrency in enumerate(concurrencies):
        settings = SETTINGS if i % 2 == 0 else SETTINGS[::-1]
        out += [(n, concurrency) for n in settings]
    return out


def replica_waits(exposition: str) -> dict[str, int]:
    """svc's replica waits so far by result (``acked``, ``short``), from the text of its
    ``GET /metrics`` (every worker's counters summed)."""
    out: dict[str, int] = {}
    for line in exposition.splitlines():
        if not line.startswith(WAITS_METRIC + "{"):
            continue
        labels, _, value = line.rpartition(" ")
        if found := _RESULT.search(labels):
            out[found.group(1)] = out.get(found.group(1), 0) + int(float(value))
    return out


def grown(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """How much each count grew from ``before`` to ``after``."""
    return {k: n - before.get(k, 0) for k, n in sorted(after.items())}


class ReplicaFigures(msgspec.Struct, frozen=True, kw_only=True):
    """What one point on the replicated primary measured, per completion where it says so."""

    min_replicas: int
    concurrency: int
    requests: int  # every request of the point, warm-up included (the per-completion base)
    rps: float
    ttfb_p50_ms: float
    latency_p50_ms: float  # request sent to the stream's end: the settle and its WAIT inside
    cpu_ms_per_request: float | None  # svc's process tree
    script_calls: float  # EVALSHA per completion
    wait_calls: float  # WAIT per completion
    main_thread_cpu_us: float | None  # the primary's main thread per completion
    waits_acked: int  # svc's replica waits over the point, by how each ended
    waits_short: int
    errors: int


class ReplicaCost(msgspec.Struct, frozen=True, kw_only=True):
    """``SVC_REDIS_MIN_REPLICAS=1`` against ``=0`` at one concurrency, on the same primary and
    replica in the same run: each ratio is 1's figure / 0's (None when 0's is missing or 0)."""

    concurrency: int
    rps_ratio: float | None
    cpu_per_request_ratio: float | None
    ttfb_p50_ratio: float | None
    latency_p50_ratio: float | None
    main_thread_ratio: float | None
    wait_calls: float  # WAITs per completion with 1
    waits_per_completion: float  # svc's replica waits (acked + short) per completion with 1
    waits_short: int  # svc's short waits with 1


def _ratio(with_wait: float | None, without: float | None) -> float | None:
    if with_wait is None or not without:
        return None
    return round(with_wait / without, 3)


def _at(figures: Sequence[ReplicaFigures], min_replicas: int, c: int) -> ReplicaFigures | None:
    for f in figures:
        if (f.min_replicas, f.concurrency) == (min_replicas, c):
            return f
    return None


def costs(figures: Sequence[ReplicaFigures]) -> list[ReplicaCost]:
    """The cost of ``SVC_REDIS_MIN_REPLICAS=1`` at each concurrency where both settings were
    measured, in the order of the points."""
    out = []
    for c in dict.fromkeys(f.concurrency for f in figures):
        without, with_wait = _at(figures, 0, c), _at(figures, 1, c)
        if without is None or with_wait is None:
            continue
        out.append(
            ReplicaCost(
                concurrency=c,
                rps_ratio=_ratio(with_wait.rps, without.rps),
                cpu_per_request_ratio=_ratio(
                    with_wait.cpu_ms_per_request, without.cpu_ms_per_request
                ),
                ttfb_p50_ratio=_ratio(with_wait.ttfb_p50_ms, without.ttfb_p50_ms),
                latency_p50_ratio=_ratio(with_wait.latency_p50_ms, without.latency_p50_ms),
                main_thread_ratio=_ratio(with_wait.main_thread_cpu_us, without.main_thread_cpu_us),
                wait_calls=with_wait.wait_calls,
                waits_per_completion=round(
                    (with_wait.waits_acked + with_wait.waits_short) / max(1, with_wait.requests),
                    3,
                ),
                waits_short=with_wait.waits_short,
            )
        )
    return out


def _times(ratio: float | None) -> str:
    return "not measured" if ratio is None else f"{ratio:.3f} x"


def markdown(figures: Sequence[ReplicaFigures], found: Sequence[ReplicaCost]) -> list[str]:
    """The report's section: every point on the replicated primary in the order measured,
    then the cost of ``SVC_REDIS_MIN_REPLICAS=1`` at each concurrency."""
    if not figures:
        return []
    lines = [
        "",
        "SVC_REDIS_MIN_REPLICAS on a primary with one replica, fast scenario, in the order "
        "measured (svc started afresh for each run of one setting): with 1, svc sends `WAIT` "
        "after each settle, before the stream's last chunk (a burst of pipelined settles "
        "shares one). WAIT per completion: "
        "Δ `INFO commandstats` of the primary / requests; replica waits: Δ "
        f"`{WAITS_METRIC}` on svc's `/metrics` by result.",
        "",
        "| MIN_REPLICAS | C | req/s | TTFB p50 | latency p50 | server CPU ms/req "
        "| script calls | WAIT | main thread CPU µs | replica waits acked / short | errors |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for f in figures:
        cpu = "" if f.cpu_ms_per_request is None else f"{f.cpu_ms_per_request:.3f}"
        main = "" if f.main_thread_cpu_us is None else f"{f.main_thread_cpu_us:.1f}"
        lines.append(
            f"| {f.min_replicas} | {f.concurrency} | {f.rps:,.0f} | {f.ttfb_p50_ms:.2f} "
            f"| {f.latency_p50_ms:.2f} | {cpu} | {f.script_calls:g} | {f.wait_calls:g} | {main} "
            f"| {f.waits_acked:,} / {f.waits_short:,} | {f.errors} |"
        )
    for cost in found:
        lines += [
            "",
            f"The cost of SVC_REDIS_MIN_REPLICAS=1 at C={cost.concurrency}, against 0 on the "
            f"same primary and replica: req/s {_times(cost.rps_ratio)}, server CPU per "
            f"request {_times(cost.cpu_per_request_ratio)}, TTFB p50 "
            f"{_times(cost.ttfb_p50_ratio)}, latency p50 {_times(cost.latency_p50_ratio)}, "
            f"the primary's main thread per completion {_times(cost.main_thread_ratio)}; "
            f"WAITs sent per completion {cost.wait_calls:g}, scripts waited for per "
            f"completion {cost.waits_per_completion:g}, short waits {cost.waits_short:,}.",
        ]
    return lines
