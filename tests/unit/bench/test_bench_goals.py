"""Issue 37's same-run targets against the floor and TensorZero, and the capacity model."""

from __future__ import annotations

import pytest

from bench.beside import Figures
from bench.goals import (
    ScaleFigures,
    added_ttfb,
    capacity,
    floor_goals,
    primaries_for,
    scale_added,
    scale_goal,
    ttfb_below_peer,
)


def _f(scenario: str, target: str, c: int, ttfb: float, **more: float) -> Figures:
    return Figures(
        scenario=scenario,
        target=target,
        concurrency=c,
        rps=100.0,
        chunks_per_s=5000.0,
        ttfb_p50_ms=ttfb,
        **more,  # type: ignore[arg-type]
    )


POINTS = [
    _f("fast", "direct", 1, 0.25),
    _f("fast", "svc", 1, 0.95),
    _f("fast", "direct", 50, 6.0),
    _f("fast", "svc", 50, 15.0, cpu_ms_per_request=0.40),
    _f("tokens", "direct", 200, 11.0),
    _f("tokens", "svc", 200, 14.0, cpu_us_per_chunk=44.0),
    _f("tokens", "floor", 200, 12.5, cpu_us_per_chunk=41.0),
    _f("fast", "floor", 1, 0.7),
    _f("fast", "floor", 50, 9.0, cpu_ms_per_request=0.30),
    _f("tokens", "tensorzero", 200, 47.0, cpu_us_per_chunk=42.0),
    _f("fast", "tensorzero", 1, 44.0),
    _f("fast", "tensorzero", 50, 8.0),
]
LABELS = {"tensorzero": "tensorzero 2026.6.0"}


def test_the_chunk_and_request_floors_and_tensorzero_each_against_svc() -> None:
    found = {g.name: g for g in floor_goals(POINTS, "floor", LABELS)}
    chunk = found["CPU per relayed chunk against the floor, tokens, C=200"]
    assert chunk.met  # 44 / 41 = 1.07 <= 1.1
    assert chunk.measured == "1.07 x (44 / 41 µs)"
    assert chunk.goal == "<= 1.1 x the floor's (bare relay + 2 Redis round trips)"
    peer = found["CPU per relayed chunk against tensorzero 2026.6.0, tokens, C=200"]
    assert peer.met  # 44 / 42 = 1.05
    request = found["CPU per request against the floor, fast, C=50"]
    assert not request.met  # 0.40 / 0.30 = 1.33 > 1.25
    assert request.measured == "1.33 x (0.4 / 0.3 ms)"
    assert request.goal.startswith("<= 1.25 x ")


def test_a_target_is_left_out_where_a_side_was_not_measured() -> None:
    without = [f for f in POINTS if f.target not in ("floor", "tensorzero")]
    assert floor_goals(without, "floor", {}) == []
    no_cpu = [f for f in POINTS if f.target != "floor"] + [_f("tokens", "floor", 200, 12.0)]
    names = [g.name for g in floor_goals(no_cpu, "floor", {})]
    assert names == ["CPU per relayed chunk against tensorzero, tokens, C=200"]


def test_added_ttfb_is_against_direct_at_the_same_point() -> None:
    assert added_ttfb(POINTS, "tensorzero") == pytest.approx(
        {("tokens", 200): 36.0, ("fast", 1): 43.75, ("fast", 50): 2.0}
    )


def test_svc_must_add_less_ttfb_than_tensorzero_at_every_point_it_ran() -> None:
    goal = ttfb_below_peer(POINTS, LABELS)
    assert goal is not None
    assert not goal.met  # fast C=50: svc +9.00 against +2.00
    assert goal.measured.endswith("(1 missed)")
    assert "fast C=50 +9.00 / +2.00" in goal.measured
    faster = [f for f in POINTS if (f.scenario, f.target, f.concurrency) != ("fast", "svc", 50)]
    goal = ttfb_below_peer(faster, LABELS)
    assert goal is not None
    assert goal.met
    assert ttfb_below_peer([f for f in POINTS if f.target != "tensorzero"], LABELS) is None


def test_capacity_of_a_primary_and_of_a_worker_core() -> None:
    model = capacity(redis_us=80.0, script_us=60.0, svc_ms=0.4)
    assert model is not None
    assert model.per_primary == pytest.approx(12_500)
    assert model.per_primary_scripts_only == pytest.approx(16_666.67, rel=1e-4)
    assert model.per_worker_core == pytest.approx(2_500)
    assert model.cores_per_primary == pytest.approx(5.0)
    bare = capacity(redis_us=50.0)
    assert bare is not None
    assert (bare.per_primary, bare.per_worker_core, bare.cores_per_primary) == (20_000, None, None)
    assert capacity(redis_us=0.0) is None


def test_primaries_needed_for_a_rate() -> None:
    assert primaries_for(30_000, 12_500) == 3
    assert primaries_for(25_000, 12_500) == 2
    assert primaries_for(10, 12_500) == 1


def _scale(streams: int, target: str, gap_p99: float, ttfb_p99: float) -> ScaleFigures:
    return ScaleFigures(
        streams=streams, target=target, inter_chunk_p99_ms=gap_p99, ttfb_p99_ms=ttfb_p99
    )


def test_the_scale_target_is_what_svc_adds_over_direct_at_the_largest_level() -> None:
    points = [
        _scale(200, "direct", 1001.0, 1003.0),
        _scale(200, "svc", 1003.0, 1010.0),
        _scale(10_000, "direct", 1440.0, 1500.0),
        _scale(10_000, "svc", 1520.0, 1700.0),
    ]
    assert scale_added(points) == {200: (2.0, 7.0), 10_000: (80.0, 200.0)}
    goal = scale_goal(points)
    assert goal is not None
    assert goal.met
    assert "10,000 streams" in goal.name
    assert goal.measured == "+80.0 ms (1,520.0 ms, direct 1,440.0); TTFB p99 +200.0 ms"
    late = [*points[:3], _scale(10_000, "svc", 1740.0, 2000.0)]
    missed = scale_goal(late)
    assert missed is not None
    assert not missed.met
    # a level without its direct side is not held to the target
    assert scale_goal([_scale(10_000, "svc", 1740.0, 2000.0)]) is None


def test_the_scale_target_says_what_the_floor_adds_at_the_same_level() -> None:
    points = [
        _scale(10_000, "direct", 1010.0, 1020.0),
        _scale(10_000, "floor", 1300.0, 1500.0),
        _scale(10_000, "svc", 1410.0, 2700.0),
    ]
    assert scale_added(points, "floor") == {10_000: (290.0, 480.0)}
    goal = scale_goal(points, "floor")
    assert goal is not None
    assert not goal.met  # held to what svc adds over direct, whatever the floor adds
    assert goal.measured == (
        "+400.0 ms (1,410.0 ms, direct 1,010.0); TTFB p99 +1680.0 ms; "
        "the floor adds +290.0 / +480.0 ms"
    )
    # the floor's rows are not svc's: without svc at a level there is no target
    assert scale_goal(points[:2], "floor") is None
