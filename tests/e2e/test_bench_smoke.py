"""The benchmark end to end, on a tiny load: it starts its own stack, measures, checks
conservation and writes its three reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def test_bench_smoke_run(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--profile", "smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        timeout=110,
        check=False,
    )
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    report = json.loads((tmp_path / "bench-results.json").read_text())
    assert (tmp_path / "bench-results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (tmp_path / "bench-results.md").read_text()
    assert "| fast | svc | 4 |" in markdown
    points = report["points"]
    assert {(p["target"], p["load"]["concurrency"]) for p in points} >= {
        ("direct", 1),
        ("svc", 1),
        ("direct", 4),
        ("svc", 4),
    }
    for p in points:
        assert p["load"]["errors"] == {}, p
        assert p["load"]["total_ok"] == p["load"]["total_requests"] > 0
    for p in points:
        if p["target"] == "svc" and p["scenario"] not in ("memory", "scale"):
            assert p["load"]["requests"] > 0
            assert p["script_calls_per_completion"] == 2.0
            assert p["server_cpu_ms_per_request"] > 0
    # the tokens point: each chunk on its own, timed and costed per chunk
    tokens = {p["target"]: p for p in points if p["scenario"] == "tokens"}
    assert set(tokens) == {"direct", "svc"}
    for p in tokens.values():
        assert p["load"]["content_chunks"] == 10 * p["load"]["requests"] > 0
        assert p["load"]["inter_chunk_ms"]["p50"] > 0
        assert p["server_cpu_us_per_chunk"] > 0
        assert p["rss_kb_per_stream"] is not None
    assert "| svc | 4 |" in markdown.split("Tokens:")[1]
    # the scale level: its streams all held at once, each worker's RSS before and at its
    # peak, no error, no reservation left open; the same streams straight to the mock first
    scale = {p["target"]: p for p in points if p["scenario"] == "scale"}
    assert sorted(scale) == ["direct", "svc"]
    assert scale["direct"]["load"]["concurrency"] == 8
    assert scale["direct"]["load"]["content_chunks"] == 3 * scale["direct"]["load"]["requests"]
    level = scale["svc"]
    assert level["load"]["concurrency"] == 8
    assert level["load"]["content_chunks"] == 3 * level["load"]["requests"] > 0
    assert level["reservations_open_after"] == 0
    assert level["rss_kb_per_stream"] is not None
    assert level["streams_per_worker"] is not None
    assert len(level["idle_rss_mb_per_worker"]) == len(level["rss_mb_per_worker"]) == 1
    assert "| scale: errors at 8 open streams | 0 at each | 0 | yes |" in markdown
    # the Responses point beside a chat point of its own, and their ratio as a target
    paired = [p["scenario"] for p in points if p["scenario"].startswith("responses")]
    assert paired == ["responses-chat", "responses"]
    assert "| Responses API throughput, fast, C=4 | >= 0.9 x chat completions | " in markdown
    assert "median of 1 alternating pairs" in markdown
    # and the Messages API's, the same way
    paired = [p["scenario"] for p in points if p["scenario"].startswith("messages")]
    assert paired == ["messages-chat", "messages"]
    assert "| Messages API throughput, fast, C=4 | >= 0.9 x chat completions | " in markdown
    # svc on a primary with one replica, SVC_REDIS_MIN_REPLICAS 0 then 1: a WAIT only with
    # 1, every settle waited for once (a WAIT may answer for several), the money exact
    replicated = {p["target"]: p for p in points if p["target"].startswith("svc-min-replicas-")}
    without, with_wait = replicated["svc-min-replicas-0"], replicated["svc-min-replicas-1"]
    assert [p["load"]["concurrency"] for p in (without, with_wait)] == [4, 4]
    assert without["redis"]["wait_calls"] == 0
    assert without["replica_waits"] == {"acked": 0, "short": 0}
    assert 0 < with_wait["redis"]["wait_calls"] <= 1
    waits = with_wait["replica_waits"]
    assert waits["acked"] + waits["short"] == with_wait["load"]["total_requests"]
    assert with_wait["script_calls_per_completion"] == 2.0
    (cost,) = report["replica_costs"]
    assert cost["concurrency"] == 4
    assert cost["rps_ratio"] > 0
    assert "The cost of SVC_REDIS_MIN_REPLICAS=1 at C=4" in markdown
    assert report["replica_conservation"]["ok"] is True
    assert report["replica_conservation"]["accounts"] == 2
    # on request connections: the two script calls and nothing else
    assert report["wire_commands_per_completion"] == {"evalsha": 2.0}
    conservation = report["conservation"]
    assert conservation["ok"] is True
    assert conservation["open_reservations"] == 0
    assert conservation["failed_requests"] == 0
    assert (
        conservation["balance_decrease"]
        == conservation["credits_reported"]
        == conservation["usage_counters"]
        > 0
    )
