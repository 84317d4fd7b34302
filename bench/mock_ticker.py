"""The mock upstream's paced streams (``tokensNxMS``, ``slowMS``) without a task per stream.

A paced chat stream used to be a task that slept between its chunks and encoded each chunk
as it went: at 10,000 open streams that is 10,000 task wake-ups, timers and JSON encodings a
second on the mock's one loop, which fell behind its own schedule (bench/README.md, "Scale:
open streams"). Here every stream's events are encoded once, when it starts (the same bytes
``_Conn._events`` writes for an unpaced stream), and one timer for the whole mock, armed for
the earliest due chunk, writes every chunk that is due when it fires. A chunk is due at the
stream's start plus its index times the delay, so a late tick does not push the stream's
later chunks back: the mock keeps its schedule, as an upstream's clock would.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Protocol

EARLY_S = 0.0005  # a chunk due this soon is written by the tick that fires now


class Writer(Protocol):
    """What the ticker needs of a connection: write, and whether the client left."""

    closed: bool

    def _write(self, data: bytes) -> None: ...


class Counts(Protocol):
    """The mock's counters the ticker keeps (``bench.mock_upstream.Stats``)."""

    in_flight: int
    completed: int


class _Paced:
    __slots__ = ("conn", "delay_s", "done", "events", "next", "start")

    def __init__(
        self,
        conn: Writer,
        events: list[bytes],
        delay_s: float,
        start: float,
        done: Callable[[bool], None],
    ) -> None:
        self.conn = conn
        self.events = events  # content chunks, then the tail (finish, usage, [DONE]) in one
        self.delay_s = delay_s
        self.start = start
        self.next = 0  # the index of the next event to write
        self.done = done  # called once: True when the stream ran to its end


class Ticker:
    """Writes every paced stream's chunks on time from one timer."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, _Paced]] = []
        self._order = itertools.count()  # ties in due time go in the order streams started
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = 0.0

    def stream(
        self, conn: Writer, events: list[bytes], chunks: int, delay_s: float, stats: Counts
    ) -> asyncio.Future[None]:
        """A chat stream's ``events`` (the role chunk, ``chunks`` content chunks, then the
        finish and usage chunks and the body's end, each encoded; the response head and the
        role chunk written already) paced on ``conn``: the tail goes with the last content
        chunk, as the mock's task wrote it. The future is done when the stream ends (cancel
        it when the client leaves: the ticker drops the stream at its next chunk)."""
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        stats.in_flight += 1

        def done(completed: bool) -> None:
            stats.in_flight -= 1
            stats.completed += completed
            if not ended.done():
                ended.set_result(None)

        paced = [*events[1:chunks], b"".join(events[chunks:])]
        self.add(conn, paced, delay_s, done)
        return ended

    def add(
        self,
        conn: Writer,
        events: list[bytes],
        delay_s: float,
        done: Callable[[bool], None],
    ) -> None:
        """Pace ``events`` on ``conn``, one every ``delay_s`` from now (the first after one
        delay), the last one with whatever follows it; ``done`` when it ends or the client
        left."""
        loop = asyncio.get_running_loop()
        paced = _Paced(conn, events, delay_s, loop.time(), done)
        due = paced.start + (paced.next + 1) * paced.delay_s
        heapq.heappush(self._due, (due, next(self._order), paced))
        if self._timer is None or due < self._armed_at:
            if self._timer is not None:
                self._timer.cancel()
            self._armed_at = due
            self._timer = loop.call_at(due, self._tick)

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = None
        now = loop.time() + EARLY_S
        due = self._due
        while due and due[0][0] <= now:
            paced = heapq.heappop(due)[2]
            if paced.conn.closed:
                paced.done(False)
                continue
            paced.conn._write(paced.events[paced.next])
            paced.next += 1
            if paced.next < len(paced.events):
                heapq.heappush(
                    due,
                    (paced.start + (paced.next + 1) * paced.delay_s, next(self._order), paced),
                )
            else:
                paced.done(True)
        if due:
            self._armed_at = due[0][0]
            self._timer = loop.call_at(self._armed_at, self._tick)
