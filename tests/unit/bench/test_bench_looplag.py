"""An event loop's lag as a probe inside it sees it (``bench.looplag``), and the mock's paced
streams written by one timer (``bench.mock_ticker``)."""

from __future__ import annotations

import asyncio
import time

from bench.looplag import LagProbe, lag_answer, summarise
from bench.mock_ticker import Ticker


def test_lags_are_summarised_by_nearest_rank() -> None:
    found = summarise([float(x) for x in range(100, 0, -1)], gc_pauses=2, gc_max_ms=3.456)
    assert (found.samples, found.p50, found.p99, found.max) == (100, 51.0, 100.0, 100.0)
    assert (found.gc_pauses, found.gc_max_ms) == (2, 3.46)
    assert summarise([]).samples == 0


async def test_a_busy_loop_wakes_the_probe_late_by_as_much() -> None:
    probe = LagProbe(interval_s=0.01)
    probe.start()
    await asyncio.sleep(0.03)
    time.sleep(0.1)  # noqa: ASYNC251 (the loop held 100 ms: the probe wakes that late)
    await asyncio.sleep(0.03)
    probe.stop()
    found = probe.between()
    assert found.max >= 80.0
    assert probe.between(start=time.time() + 60).samples == 0  # a span with no wake-up
    assert b'"samples":0' in lag_answer(probe, f"/_lag?start={time.time() + 60}&end=1e12")
    assert lag_answer(None, "/_lag") == b"null"


class _Conn:
    def __init__(self) -> None:
        self.closed = False
        self.written: list[tuple[float, bytes]] = []

    def _write(self, data: bytes) -> None:
        self.written.append((time.perf_counter(), data))


class _Stats:
    in_flight = 0
    completed = 0


async def test_paced_streams_keep_their_schedule_from_one_timer() -> None:
    ticker, stats = Ticker(), _Stats()
    conns = [_Conn() for _ in range(3)]
    started = time.perf_counter()
    ended = [
        ticker.stream(c, [b"role", b"a", b"b", b"c", b"finish", b"end"], 3, 0.02, stats)
        for c in conns
    ]
    assert stats.in_flight == 3
    await asyncio.gather(*ended)
    assert (stats.in_flight, stats.completed) == (0, 3)
    for c in conns:
        # the role chunk went with the head; then one content chunk a delay, the last with
        # the stream's tail
        assert [d for _, d in c.written] == [b"a", b"b", b"cfinishend"]
        offsets = [at - started for at, _ in c.written]
        for i, at in enumerate(offsets):
            assert at >= 0.02 * (i + 1) - 0.001


async def test_a_stream_whose_client_left_is_dropped_at_its_next_chunk() -> None:
    ticker, stats = Ticker(), _Stats()
    gone, stays = _Conn(), _Conn()
    left = ticker.stream(gone, [b"role", b"a", b"b", b"end"], 2, 0.01, stats)
    kept = ticker.stream(stays, [b"role", b"a", b"b", b"end"], 2, 0.01, stats)
    gone.closed = True
    left.cancel()  # as the connection's loss cancels it
    await kept
    await asyncio.sleep(0.02)
    assert gone.written == []
    assert [d for _, d in stays.written] == [b"a", b"bend"]
    assert (stats.in_flight, stats.completed) == (0, 1)
