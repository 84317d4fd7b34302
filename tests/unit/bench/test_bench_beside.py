"""The report's table of svc beside every peer, each against direct at the same point, and
the peers the run skipped, each with its reason in one line."""

from __future__ import annotations

import pytest

from bench.beside import LOG_LINE_CHARS, Figures, markdown, rows, skip_reason, skipped_lines


def _f(scenario: str, target: str, c: int, rps: float, ttfb: float, **more: float) -> Figures:
    return Figures(
        scenario=scenario,
        target=target,
        concurrency=c,
        rps=rps,
        chunks_per_s=rps * 50,
        ttfb_p50_ms=ttfb,
        **more,  # type: ignore[arg-type]
    )


POINTS = [
    _f("fast", "direct", 50, 7000, 6.0, cpu_ms_per_request=0.1),
    _f("fast", "svc", 50, 2800, 15.0, cpu_ms_per_request=0.4, cpu_us_per_chunk=20.0),
    _f("tokens", "direct", 200, 400, 11.0),
    _f("tokens", "svc", 200, 360, 14.0, cpu_us_per_chunk=45.0, rss_kb_per_stream=58.0),
    _f("fast", "direct", 1, 3500, 0.25),
    _f("fast", "svc", 1, 700, 1.15),  # no peer at C=1: no row
    _f("tokens", "envoy", 200, 392, 12.0, cpu_us_per_chunk=27.0, rss_kb_per_stream=9.0),
    _f("tokens", "tensorzero", 200, 370, 47.0, cpu_us_per_chunk=42.0, rss_kb_per_stream=30.0),
    _f("fast", "tensorzero", 50, 1000, 50.0, cpu_ms_per_request=0.9),
    _f("fast", "envoy", 50, 5600, 7.0, cpu_ms_per_request=0.07),
]


def test_svc_then_each_peer_in_order_at_every_point_a_peer_ran() -> None:
    found = rows(POINTS, ["tensorzero", "envoy"])
    assert [(r.scenario, r.concurrency, r.target) for r in found] == [
        ("tokens", 200, "svc"),
        ("tokens", 200, "tensorzero"),
        ("tokens", 200, "envoy"),
        ("fast", 50, "svc"),
        ("fast", 50, "tensorzero"),
        ("fast", 50, "envoy"),
    ]


def test_tokens_throughput_is_in_chunks_and_the_others_in_requests() -> None:
    by = {(r.scenario, r.target): r for r in rows(POINTS, ["tensorzero", "envoy"])}
    tokens = by[("tokens", "envoy")]
    assert (tokens.throughput, tokens.unit) == (392 * 50, "chunks/s")
    assert tokens.x_direct == pytest.approx(392 / 400)
    assert tokens.added_ttfb_ms == pytest.approx(1.0)
    assert (tokens.cpu_us_per_chunk, tokens.rss_kb_per_stream) == (27.0, 9.0)
    fast = by[("fast", "svc")]
    assert (fast.throughput, fast.unit) == (2800, "req/s")
    assert fast.x_direct == pytest.approx(0.4)
    assert fast.added_ttfb_ms == pytest.approx(9.0)
    assert fast.cpu_ms_per_request == 0.4


def test_a_point_without_its_direct_baseline_has_no_ratio() -> None:
    points = [_f("slow", "svc", 50, 120, 22.0), _f("slow", "envoy", 50, 121, 21.0)]
    found = rows(points, ["envoy"])
    assert [(r.target, r.x_direct, r.added_ttfb_ms) for r in found] == [
        ("svc", None, None),
        ("envoy", None, None),
    ]


def test_a_run_without_peer_points_has_no_table() -> None:
    assert rows(POINTS[:6], ["envoy"]) == []
    assert markdown([], {}) == []


def test_the_markdown_rows_carry_each_figure_and_the_peers_labels() -> None:
    lines = markdown(rows(POINTS, ["envoy"]), {"envoy": "envoy 1.40.0"})
    table = [line for line in lines if line.startswith("| ")]  # the header, then the rows
    assert table[0].startswith("| upstream | C | target | throughput | x direct |")
    assert table[1] == (
        "| tokens | 200 | svc | 18,000 chunks/s | 0.900 | 14.00 ms | +3.00 ms |  | 45.0 "
        "| 58.0 | 0 |"
    )
    assert table[2] == (
        "| tokens | 200 | envoy 1.40.0 | 19,600 chunks/s | 0.980 | 12.00 ms | +1.00 ms |  "
        "| 27.0 | 9.0 | 0 |"
    )
    assert table[4].startswith("| fast | 50 | envoy 1.40.0 | 5,600 req/s | 0.800 | 7.00 ms |")


def test_a_failed_peers_reason_is_one_line_with_its_log_and_the_logs_last_line() -> None:
    # running_peer's error names the log: it is not named twice
    assert skip_reason("litellm exited; see /tmp/a.log", "/tmp/a.log", "  Error: no port\n") == (
        "litellm exited; see /tmp/a.log; its last line: Error: no port"
    )
    # a load point's error: its first and last lines, then the log it does not name
    error = "the load generator failed:\nTraceback (most recent call last):\n  OSError: boom\n"
    assert skip_reason(error, "/tmp/b.log") == (
        "the load generator failed: OSError: boom; log /tmp/b.log"
    )
    long = skip_reason("envoy exited", None, "x" * 500)
    assert "\n" not in long
    assert long.endswith("x" * (LOG_LINE_CHARS - 1) + "…")
    assert skip_reason("\n") == "failed"


def test_skipped_peers_are_listed_under_the_table_with_their_reasons() -> None:
    assert skipped_lines({}) == []
    lines = skipped_lines({"portkey": "needs node and npm", "litellm": "litellm exited"})
    assert lines == [
        "",
        "Peers skipped in this run:",
        "",
        "- portkey: needs node and npm",
        "- litellm: litellm exited",
    ]
