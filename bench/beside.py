"""svc beside every peer: the rows of the report's peers table, from each point's figures.

For every scenario and concurrency at which a peer was measured, svc's point and each peer's,
each held against the direct point of the same scenario and concurrency in the same run:
throughput as a multiple of direct (content chunks per second on the tokens scenario, whose
streams are long; requests per second elsewhere), the TTFB it adds, its server's CPU per
request and per relayed chunk, and RSS per open stream (tokens only). Under the table, the
peers the run skipped, each with its reason. Kept apart from the report so that tests can
build the rows from plain figures.
"""

from __future__ import annotations

import msgspec

# The scenario whose throughput is counted in content chunks (each chunk its own write).
CHUNK_SCENARIOS = ("tokens",)


class Figures(msgspec.Struct, frozen=True, kw_only=True):
    """What the table reads of one point."""

    scenario: str
    target: str  # "direct" | "svc" | a peer's name
    concurrency: int
    rps: float
    chunks_per_s: float
    ttfb_p50_ms: float
    cpu_ms_per_request: float | None = None
    cpu_us_per_chunk: float | None = None
    rss_kb_per_stream: float | None = None
    errors: int = 0


class Row(msgspec.Struct, frozen=True, kw_only=True):
    scenario: str
    concurrency: int
    target: str
    throughput: float  # req/s, or chunks/s on a chunk scenario
    unit: str  # "req/s" | "chunks/s"
    x_direct: float | None
    ttfb_p50_ms: float
    added_ttfb_ms: float | None
    cpu_ms_per_request: float | None
    cpu_us_per_chunk: float | None
    rss_kb_per_stream: float | None
    errors: int


def _rate(f: Figures) -> float:
    return f.chunks_per_s if f.scenario in CHUNK_SCENARIOS else f.rps


def rows(points: list[Figures], peers: list[str]) -> list[Row]:
    """svc's row, then each peer's in ``peers`` order, for every (scenario, concurrency) at
    which one of ``peers`` was measured, in the order the points were measured."""
    found = {(f.scenario, f.target, f.concurrency): f for f in points}
    places = list(dict.fromkeys((f.scenario, f.concurrency) for f in points if f.target in peers))
    out = []
    for scenario, concurrency in places:
        direct = found.get((scenario, "direct", concurrency))
        for target in ("svc", *peers):
            f = found.get((scenario, target, concurrency))
            if f is None:
                continue
            ratio = added = None
            if direct is not None:
                if _rate(direct):
                    ratio = _rate(f) / _rate(direct)
                added = f.ttfb_p50_ms - direct.ttfb_p50_ms
            out.append(
                Row(
                    scenario=scenario,
                    concurrency=concurrency,
                    target=target,
                    throughput=_rate(f),
                    unit="chunks/s" if scenario in CHUNK_SCENARIOS else "req/s",
                    x_direct=ratio,
                    ttfb_p50_ms=f.ttfb_p50_ms,
                    added_ttfb_ms=added,
                    cpu_ms_per_request=f.cpu_ms_per_request,
                    cpu_us_per_chunk=f.cpu_us_per_chunk,
                    rss_kb_per_stream=f.rss_kb_per_stream,
                    errors=f.errors,
                )
            )
    return out


def _num(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:+.2f} ms"


def markdown(found: list[Row], labels: dict[str, str]) -> list[str]:
    """The table's lines (none without a row); ``labels`` names a target in its rows (a
    peer's name with its pinned version, say)."""
    if not found:
        return []
    lines = [
        "",
        "svc beside every peer, each against direct to the mock at the same point: throughput "
        "(chunks/s on tokens, req/s elsewhere) × direct, TTFB p50 added, the server's process "
        "tree's CPU per request and per relayed chunk, RSS per open stream (tokens).",
        "",
        "| upstream | C | target | throughput | x direct | TTFB p50 | added "
        "| server CPU ms/req | µs/chunk | RSS KB/stream | errors |",
        "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in found:
        lines.append(
            f"| {r.scenario} | {r.concurrency} | {labels.get(r.target, r.target)} "
            f"| {r.throughput:,.0f} {r.unit} | {_num(r.x_direct, '.3f')} "
            f"| {r.ttfb_p50_ms:.2f} ms | {_ms(r.added_ttfb_ms)} "
            f"| {_num(r.cpu_ms_per_request, '.3f')} | {_num(r.cpu_us_per_chunk, '.1f')} "
            f"| {_num(r.rss_kb_per_stream, '.1f')} | {r.errors} |"
        )
    return lines


# At most this many characters of a line of a failed peer's error or log go into its reason.
LOG_LINE_CHARS = 200


def _cut(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= LOG_LINE_CHARS else line[: LOG_LINE_CHARS - 1] + "…"


def skip_reason(error: str, log: str | None = None, last_line: str = "") -> str:
    """Why a peer that failed was skipped, in one line: its error's first line (and its last,
    a traceback's exception say, when it has more), where its log is (unless the error names
    it) and that log's last line; each line cut short."""
    lines = [line for line in error.splitlines() if line.strip()]
    said = _cut(lines[0]).rstrip(":") if lines else "failed"
    if len(lines) > 1:
        said += ": " + _cut(lines[-1])
    parts = [said]
    if log and log not in said:
        parts.append(f"log {log}")
    if last_line.strip():
        parts.append(f"its last line: {_cut(last_line)}")
    return "; ".join(parts)


def skipped_lines(skipped: dict[str, str]) -> list[str]:
    """The lines under the table naming each skipped peer and why (none when none was)."""
    if not skipped:
        return []
    return [
        "",
        "Peers skipped in this run:",
        "",
        *(f"- {name}: {reason}" for name, reason in skipped.items()),
    ]
