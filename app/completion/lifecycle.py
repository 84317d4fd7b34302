"""Graceful shutdown: the streams a worker has open, and its grace period after SIGTERM.

On SIGTERM granian stops accepting at once, then waits for every open connection before it
runs the lifespan shutdown, with no limit of its own short of killing the worker (which
would skip settlement and the final flush). So each worker arms a timer of its own when the
signal arrives; when the grace period runs out it *cuts* the streams still open. A cut
stream stops reading its upstream, sends what it already read, ends with an error event,
the metadata chunk and ``[DONE]``, and is settled for what was delivered; then its
connection closes, granian's shutdown goes on and the lifespan's final flush runs.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

log = logging.getLogger("svc.lifecycle")
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Cuttable(Protocol):
    def cut(self) -> None:
        """Stop the stream soon: relay what was read, then end it cleanly."""


class OpenStreams:
    """The streams this process is relaying. Once cutting starts, a stream that begins
    later (it was still connecting upstream) is cut as soon as it registers."""

    def __init__(self) -> None:
        self._streams: set[Cuttable] = set()
        self.cutting = False

    def add(self, stream: Cuttable) -> None:
        self._streams.add(stream)
        if self.cutting:
            stream.cut()

    def discard(self, stream: Cuttable) -> None:
        self._streams.discard(stream)

    def __len__(self) -> int:
        return len(self._streams)

    def cut_all(self) -> int:
        """Cut every open stream (and every later one); returns how many were open."""
        self.cutting = True
        streams = list(self._streams)
        for stream in streams:
            stream.cut()
        return len(streams)


STREAMS = OpenStreams()
"""One registry per process: a granian worker is one process with one event loop."""

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class GracePeriod:
    """Arms ``grace_s`` on the first SIGTERM or SIGINT this process receives; when it runs
    out, ``streams`` are cut.

    The handler is chained in front of the one already installed (granian's, through the
    event loop), which still runs first: granian keeps doing its part of the shutdown.
    """

    def __init__(self, grace_s: float, streams: OpenStreams = STREAMS) -> None:
        self.grace_s = grace_s
        self.streams = streams
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._previous: dict[int, _Handler] = {}

    def install(self) -> bool:
        """Chain the handlers (main thread only: elsewhere signals cannot be handled)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self._loop = asyncio.get_running_loop()
        for sig in _SIGNALS:
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._on_signal)
        return True

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            if previous is not None:
                signal.signal(sig, previous)
        self._previous.clear()
        if self._timer is not None:
            self._timer.cancel()

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.arm)

    def arm(self) -> None:
        """Start the grace period (once; a second signal does not restart it)."""
        if self._timer is None and self._loop is not None:
            self._timer = self._loop.call_later(self.grace_s, self._cut)

    def _cut(self) -> None:
        cut = self.streams.cut_all()
        if cut:
            log.warning("grace period over: cut %d open streams", cut)
