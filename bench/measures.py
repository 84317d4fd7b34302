"""What a server costs while it is measured: its process tree's CPU and RSS, and the
arithmetic of the per-chunk and per-stream figures (kept apart so it can be tested)."""

from __future__ import annotations

import contextlib

import psutil


class ProcessTree:
    """A process and its children, read through psutil."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def tree(self) -> list[psutil.Process]:
        parent = psutil.Process(self.pid)
        return [parent, *parent.children(recursive=True)]

    def cpu_seconds(self) -> float:
        total = 0.0
        for proc in self.tree():
            with contextlib.suppress(psutil.NoSuchProcess):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    def rss_bytes(self) -> int:
        total = 0
        for proc in self.tree():
            with contextlib.suppress(psutil.NoSuchProcess):
                total += proc.memory_info().rss
        return int(total)


def cpu_us_per_chunk(cpu_s: float, chunks: int) -> float | None:
    """Server CPU (user+system seconds of its process tree over a point) per relayed chunk
    with content, in microseconds; None when no chunk was relayed."""
    if chunks <= 0:
        return None
    return round(cpu_s * 1e6 / chunks, 2)


def rss_kb_per_stream(idle_bytes: int, during_bytes: int, streams: int) -> float | None:
    """(RSS while ``streams`` streams are open − RSS idle) / streams, in KiB."""
    if streams <= 0:
        return None
    return round((during_bytes - idle_bytes) / 1024 / streams, 2)
