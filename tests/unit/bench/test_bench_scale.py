"""The scale levels' arithmetic (``bench.scale``): how a level is shaped, the server's CPU
read over the measured window alone, per chunk and per open stream."""

from __future__ import annotations

import resource

import pytest

from bench.profiles import PROFILES
from bench.scale import CpuSamples, fd_limit, kb_per_stream, plan, us_per_chunk


def test_a_level_ramps_over_one_stream_and_measures_once_all_are_open() -> None:
    level = plan(10_000, chunks=20, delay_ms=1000, duration_s=20.0)
    assert level.ramp_s == 20.0  # one stream's length: they end, and start again, evenly
    assert level.warmup_s > level.ramp_s  # the window opens after the last stream started
    assert level.timeout_s > 20.0  # a stream's length with room for a slow start
    assert level.duration_s == 20.0
    assert plan(2000, chunks=20, delay_ms=1000).ramp_s == 4.0  # 500 started a second
    assert plan(20_000, chunks=20, delay_ms=1000).ramp_s == 20.0  # never longer than a stream


def test_the_default_profile_holds_ten_thousand_streams_and_the_smoke_one_a_few() -> None:
    assert PROFILES["default"].scale_streams == (200, 2000, 10000)
    smoke = PROFILES["smoke"]
    assert 0 < max(smoke.scale_streams) <= 10
    assert plan(8, smoke.scale_chunks, smoke.scale_delay_ms).ramp_s < 1.0


def test_cpu_between_two_times_is_interpolated_from_the_samples() -> None:
    cpu = CpuSamples()
    for at, seconds in [(100.0, 1.0), (101.0, 1.5), (103.0, 3.5)]:
        cpu.add(at, seconds)
    assert cpu.at(100.5) == pytest.approx(1.25)
    assert cpu.at(102.0) == pytest.approx(2.5)
    assert cpu.between(100.5, 102.0) == pytest.approx(1.25)
    assert cpu.between(101.0, 103.0) == pytest.approx(2.0)  # on the samples themselves
    assert cpu.between(99.0, 102.0) is None  # before the first sample: unknown, not guessed
    assert cpu.between(101.0, 104.0) is None
    assert CpuSamples().between(1.0, 2.0) is None


def test_cpu_per_chunk_counts_the_chunks_the_window_relayed() -> None:
    # 0.5 s of CPU over a 10 s window relaying 1,000 chunks a second: 50 µs a chunk
    assert us_per_chunk(0.5, 1000.0, 10.0) == 50.0
    assert us_per_chunk(None, 1000.0, 10.0) is None
    assert us_per_chunk(0.5, 0.0, 10.0) is None


def test_rss_per_stream_is_the_workers_growth_over_the_streams() -> None:
    # two workers grew by 20 and 30 MB holding 1,000 streams: 51.2 KiB each
    assert kb_per_stream([80.0, 80.0], [100.0, 110.0], 1000) == 51.2
    assert kb_per_stream([80.0], [100.0, 110.0], 1000) is None  # a worker missing
    assert kb_per_stream([80.0, 80.0], [100.0, 110.0], 0) is None


def test_the_open_files_limit_is_raised_or_the_level_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = {"now": (1024, 20_000)}
    monkeypatch.setattr(resource, "getrlimit", lambda _: limits["now"])
    monkeypatch.setattr(resource, "setrlimit", lambda _, new: limits.update(now=new))
    assert fd_limit(10_000) is None  # a worker's three quarters of them, two sockets each
    assert limits["now"] == (20_000, 20_000)  # raised to the hard limit, inherited by children
    problem = fd_limit(14_000)
    assert problem is not None
    assert "22024" in problem
    assert "20000" in problem
