"""Interrupting a waiting task (the shutdown's cut, the upstream idle timeout) and the upstream
client's idle timeout, which keeps one timer per idle period instead of one per read."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.core.errors import UpstreamError
from app.core.interrupts import Interruptible
from app.upstream.base import Piece
from app.upstream.config import ProviderConfig
from app.upstream.http11 import StreamingProvider
from bench.mock_upstream import MockUpstream
from tests.support.upstream_helpers import upstream_call


async def _waiting(wait: Interruptible, started: asyncio.Event) -> str:
    wait.enter()
    started.set()
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        if wait.taken_back():
            return "interrupted"
        raise
    finally:
        wait.leave()
    return "slept"


async def test_an_interrupt_is_taken_back_and_the_task_goes_on() -> None:
    wait, started = Interruptible(), asyncio.Event()
    task = asyncio.ensure_future(_waiting(wait, started))
    await started.wait()
    assert wait.interrupt()
    assert not wait.interrupt()  # once
    assert await task == "interrupted"
    assert task.cancelling() == 0


async def test_a_cancellation_from_elsewhere_stays_one() -> None:
    wait, started = Interruptible(), asyncio.Event()
    task = asyncio.ensure_future(_waiting(wait, started))
    await started.wait()
    wait.interrupt()
    task.cancel()  # the caller cancels too: the task must end cancelled
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_nothing_is_interrupted_outside_the_wait() -> None:
    wait = Interruptible()
    assert not wait.interrupt()  # never entered
    wait.enter()
    wait.leave()
    assert not wait.interrupt()  # left: a write in progress is not cut
    assert not wait.taken_back()


def _texts(batch: list[Piece]) -> int:
    return sum(isinstance(piece, str) for piece in batch)


async def _read_all(provider: StreamingProvider, model: str) -> int:
    """The content pieces of a whole stream."""
    return sum([_texts(batch) async for batch in provider.stream(upstream_call(model))])


async def test_a_stalled_stream_times_out_after_the_idle_period(mock: MockUpstream) -> None:
    provider = StreamingProvider(ProviderConfig(base_url=mock.base_url, idle_timeout_s=0.3))
    try:
        started = time.monotonic()
        with pytest.raises(UpstreamError, match="idle timeout"):
            await asyncio.wait_for(_read_all(provider, "m-stallafter2"), 5)
        assert 0.3 <= time.monotonic() - started < 2
    finally:
        await provider.close()


async def test_a_slow_steady_stream_outlives_many_idle_periods(mock: MockUpstream) -> None:
    # 10 chunks 100 ms apart take 1 s, more than three idle periods of 0.3 s: the timer
    # re-arms from each read instead of firing
    provider = StreamingProvider(ProviderConfig(base_url=mock.base_url, idle_timeout_s=0.3))
    try:
        assert await _read_all(provider, "m-tokens10x100") == 10
    finally:
        await provider.close()


async def test_a_reader_busy_elsewhere_is_not_timed_out(mock: MockUpstream) -> None:
    # the relay spends longer than the idle period writing to a slow client between reads:
    # the upstream was not silent, it was not asked
    provider = StreamingProvider(ProviderConfig(base_url=mock.base_url, idle_timeout_s=0.2))
    try:
        pieces = 0
        async for batch in provider.stream(upstream_call("m-tokens3x1")):
            pieces += _texts(batch)
            await asyncio.sleep(0.5)
        assert pieces == 3
    finally:
        await provider.close()


async def test_a_cancellation_while_reading_is_no_timeout(mock: MockUpstream) -> None:
    provider = StreamingProvider(ProviderConfig(base_url=mock.base_url, idle_timeout_s=30))
    try:
        task = asyncio.ensure_future(_read_all(provider, "m-stallafter2"))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await provider.close()
