"""Several load processes as one point (``bench.shards``): the streams shared out, the results
merged with percentiles read from every process's samples together."""

from __future__ import annotations

import msgspec
import pytest

from bench.loadgen import LoadResult, Percentiles, RawSamples
from bench.looplag import LagSummary
from bench.shards import MAX_PROCESSES, merge, processes_for, split


def test_a_level_gets_one_process_per_few_thousand_streams_and_a_few_at_most() -> None:
    assert processes_for(8) == 1
    assert processes_for(200) == 1
    assert processes_for(2000) == 1
    assert processes_for(10_000) == 4
    assert processes_for(1_000_000) == MAX_PROCESSES


def test_streams_are_shared_out_evenly_and_none_lost() -> None:
    assert split(10_000, 4) == [2500] * 4
    assert split(10, 4) == [3, 3, 2, 2]
    assert split(2, 4) == [1, 1]  # no process without a stream
    assert sum(split(9_999, 3)) == 9_999


def _result(
    gaps: list[float], ttfbs: list[float], wall: tuple[float, float], **kw: object
) -> LoadResult:
    base = {
        "concurrency": 5,
        "client": "aiohttp",
        "requests": len(ttfbs),
        "rps": 10.0,
        "ttfb_ms": Percentiles(0.0, 0.0, 0.0),
        "latency_ms": Percentiles(0.0, 0.0, 0.0),
        "errors": {},
        "errors_outside_window": {},
        "client_cpu_ms_per_request": 1.0,
        "client_cpu_share": 0.25,
        "window_s": 20.0,
        "total_requests": len(ttfbs) + 1,
        "total_ok": len(ttfbs),
        "credits_used": 7,
        "content_chunks": len(gaps),
        "chunks_per_s": 100.0,
        "window_wall": wall,
        "processes": [(0.25, LagSummary(10, 1.0, 2.0, 3.0))],
        "raw": RawSamples(ttfbs, [20_000.0] * len(ttfbs), gaps),
    }
    return msgspec.convert({**base, **kw}, LoadResult, from_attributes=True)


def test_merged_percentiles_come_from_every_sample_not_from_each_process_s_percentiles() -> None:
    # one process saw 99 gaps of 1,000 ms, the other one gap of 3,000 ms: a p99 averaged over
    # the two processes' p99s would be 2,000 ms; over their 100 samples together it is ~1,000
    quiet = _result([1000.0] * 99, [1000.0] * 3, (100.0, 120.0))
    late = _result([3000.0], [1500.0], (100.2, 120.1), errors={"timeout": 2})
    merged = merge([quiet, late])
    assert merged.inter_chunk_ms.p99 == pytest.approx(1020.0)
    assert merged.inter_chunk_ms.p50 == 1000.0
    assert merged.ttfb_ms.p99 == pytest.approx(1485.0)
    assert merged.concurrency == 10
    assert merged.rps == 20.0
    assert merged.chunks_per_s == 200.0
    assert merged.requests == 4
    assert merged.credits_used == 14
    assert merged.errors == {"timeout": 2}
    assert merged.client_cpu_share == 0.5  # half a core in all
    assert merged.window_wall == (100.2, 120.0)  # the span every process measured
    assert len(merged.processes) == 2  # each process's CPU and loop lag, kept apart
    assert merged.raw is None  # the samples stay out of the report


def test_merging_needs_every_process_s_samples() -> None:
    one = _result([1000.0], [1000.0], (0.0, 1.0))
    other = msgspec.structs.replace(one, raw=None)
    with pytest.raises(ValueError, match="samples"):
        merge([one, other])
    assert merge([other]).concurrency == 5  # one process: its result as it is
