"""The arithmetic of the per-chunk and per-stream figures, kept apart so it can be tested."""

from __future__ import annotations


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
