"""Interrupting a task while it waits, without a task, timer or future per wait.

The relay awaits its upstream directly in the task that serves the request. Two things
must be able to stop such a wait from outside: the shutdown's cut and the upstream's idle
timeout. Both cancel the waiting task, but only while it is inside the wait (never in the
middle of a write), and both take their cancellation back afterwards, so a cancellation
that also came from elsewhere (the client left) still reaches the task's caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Interruptible:
    """One task's wait that another party may interrupt.

    The waiting code brackets its await with ``enter()`` and ``leave()``; the interrupting
    party calls ``interrupt()``; the waiting code, catching ``CancelledError``, calls
    ``taken_back()`` to learn whether the cancellation was the interrupt's alone.
    """

    __slots__ = ("_interrupted", "_loop", "_task", "_waiting")

    def __init__(self) -> None:
        # asyncio.current_task() without a loop asks for the running loop, and on Python
        # 3.11 that is a getpid() system call: once per wait, it showed in the relay's profile
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[object] | None = None
        self._waiting = False
        self._interrupted = False

    def enter(self) -> None:
        """The current task starts waiting (an iterator may be read by several tasks in
        turn: the one waiting now is the one interrupted)."""
        self._task = asyncio.current_task(self._loop)
        self._waiting = True

    def leave(self) -> None:
        self._waiting = False

    @property
    def waiting(self) -> bool:
        return self._waiting

    def interrupt(self) -> bool:
        """Cancel the waiting task, once; False when nothing is waiting."""
        if not self._waiting or self._interrupted or self._task is None:
            return False
        self._interrupted = True
        self._task.cancel()
        return True

    def taken_back(self) -> bool:
        """Whether the ``CancelledError`` being handled was the interrupt's alone; it is then
        taken back (the task is no longer cancelled). False for any other cancellation."""
        task = self._task
        if not self._interrupted or task is None:
            return False
        self._interrupted = False
        task.uncancel()
        return task.cancelling() == 0


class IdleTimeout:
    """The longest silence allowed while reading an upstream's stream, kept by one timer per idle
    period rather than one per read: each read only notes when it started, and the timer,
    when it fires, interrupts a read that has waited the whole period or re-arms itself.

    Each read is wrapped in ``with idle:``; a read the timeout interrupted leaves the block
    as ``expired()``, the caller's own error (a cancellation from elsewhere stays one)."""

    __slots__ = ("_expired", "_expiry", "_handle", "_idle_s", "_loop", "_started", "_wait")

    def __init__(self, idle_s: float, expired: Callable[[], BaseException]) -> None:
        self._idle_s = idle_s
        self._expiry = expired
        self._loop = asyncio.get_running_loop()
        self._wait = Interruptible()
        self._started = self._loop.time()
        self._expired = False
        self._handle = self._loop.call_at(self._started + idle_s, self._check)

    def __enter__(self) -> None:
        self._started = self._loop.time()
        self._wait.enter()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        self._wait.leave()
        # the cancellation is taken back only when it was this timeout's alone
        if kind is asyncio.CancelledError and self._expired and self._wait.taken_back():
            raise self._expiry() from None

    def _check(self) -> None:
        now = self._loop.time()
        if self._wait.waiting and now - self._started >= self._idle_s:
            self._expired = self._wait.interrupt()
            return
        since = self._started if self._wait.waiting else now
        self._handle = self._loop.call_at(since + self._idle_s, self._check)

    def close(self) -> None:
        self._handle.cancel()
