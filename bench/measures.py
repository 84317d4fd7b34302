"""What a server costs while it is measured: its process tree's CPU and RSS, and the
arithmetic of the per-chunk and per-stream figures (kept apart so it can be tested)."""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterable
from typing import Any

import msgspec
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


def rss_at_streams(idle_mb: float, peak_mb: float, held: int, wanted: int) -> float:
    """A worker's RSS with ``wanted`` streams open, from its RSS before any (``idle_mb``) and
    its peak while it held ``held``: what the streams added, per stream, times ``wanted``."""
    return idle_mb + (peak_mb - idle_mb) * wanted / held


def paired_ratio(pairs: Iterable[tuple[float, float]]) -> tuple[float, int] | None:
    """The same-run ratio of another API's throughput to chat's: ``pairs`` holds, for each
    point of the other API, (the req/s of the chat point measured beside it, its own req/s).
    The median of their ratios and how many pairs it was taken over (a chat point that
    served nothing counts for none); None when no pair counts."""
    ratios = [other / chat for chat, other in pairs if chat]
    if not ratios:
        return None
    return statistics.median(ratios), len(ratios)


def commands_per_request(
    before: dict[str, int], after: dict[str, int], requests: int
) -> dict[str, float]:
    """How much each command's calls (``INFO commandstats``) grew over a point, per request;
    the bench's own ``INFO`` is left out, and so is a command that did not grow."""
    grown = {k: n - before.get(k, 0) for k, n in after.items() if k != "info"}
    return {k: round(n / max(1, requests), 3) for k, n in sorted(grown.items()) if n > 0}


def tally_monitor(lines: list[str], names: dict[str, str]) -> tuple[dict[str, int], dict[str, int]]:
    """Commands of ``MONITOR`` lines, counted apart for the request connections and the
    ``svc-background`` ones (``names``: client addresses to names when the sample began).
    A connection opened during the sample is named by its ``CLIENT SETNAME``, which comes
    after its handshake (``HELLO``): names are read from every line before any is counted."""
    commands: list[tuple[str, str]] = []
    names = dict(names)
    for line in lines:
        addr, _, rest = line.partition("] ")
        addr = addr.rpartition(" ")[2]
        if addr == "lua" or not rest.startswith('"'):
            continue  # what a script ran is part of that one script call
        words = rest.split('"')
        command = words[1].lower()
        if command == "client" and len(words) > 5 and words[3].lower() == "setname":
            names[addr] = words[5]
        commands.append((addr, command))
    hot: dict[str, int] = {}
    background: dict[str, int] = {}
    for addr, command in commands:
        tally = background if names.get(addr) == "svc-background" else hot
        tally[command] = tally.get(command, 0) + 1
    return hot, background


SCRIPT_COMMANDS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")
"""Commands that run a script or a function: one round trip each, whatever runs inside. Redis
counts what a script runs under each command too (``cmdstat_hget``…) and inside the script's
own ``usec``, so only these are summed for a completion's script time."""


class RedisSnapshot(msgspec.Struct, frozen=True):
    """What one Redis server (or the sum over a cluster's primaries) has done so far."""

    script_calls: int = 0  # calls of SCRIPT_COMMANDS
    script_usec: int = 0  # their usec (INFO commandstats), what they ran inside included
    main_thread_cpu_s: float = 0.0  # user+system CPU of the main thread (INFO cpu)
    process_cpu_s: float = 0.0  # user+system CPU of every thread (AOF, I/O threads too)
    # calls of WAIT: svc sends one after its settles with SVC_REDIS_MIN_REPLICAS (a burst of
    # pipelined settles shares one), none without
    wait_calls: int = 0


def redis_snapshot(commandstats: dict[str, Any], cpu: dict[str, Any]) -> RedisSnapshot:
    """A snapshot from ``INFO commandstats`` and ``INFO cpu`` of one server, as redis-py
    parses them (``{"cmdstat_evalsha": {"calls": …, "usec": …}, …}``)."""
    calls = usec = waits = 0
    for name, each in commandstats.items():
        if not isinstance(each, dict):
            continue
        command = name.removeprefix("cmdstat_").lower()
        if command in SCRIPT_COMMANDS:
            calls += int(each.get("calls", 0))
            usec += int(each.get("usec", 0))
        elif command == "wait":
            waits += int(each.get("calls", 0))
    main = float(cpu.get("used_cpu_user_main_thread", 0)) + float(
        cpu.get("used_cpu_sys_main_thread", 0)
    )
    whole = float(cpu.get("used_cpu_user", 0)) + float(cpu.get("used_cpu_sys", 0))
    return RedisSnapshot(calls, usec, main, whole, waits)


def summed(snapshots: Iterable[RedisSnapshot]) -> RedisSnapshot:
    """The snapshots of a cluster's primaries as one: what the cluster did in all."""
    out = RedisSnapshot()
    for s in snapshots:
        out = RedisSnapshot(
            out.script_calls + s.script_calls,
            out.script_usec + s.script_usec,
            out.main_thread_cpu_s + s.main_thread_cpu_s,
            out.process_cpu_s + s.process_cpu_s,
            out.wait_calls + s.wait_calls,
        )
    return out


class RedisCost(msgspec.Struct, frozen=True, kw_only=True):
    """Redis's own cost per completion over a point: its script time (``INFO commandstats``
    usec of the script calls), its main thread's CPU (what one primary is bound by: it runs
    every command) and its whole process's CPU, in microseconds, and its script and WAIT
    calls."""

    script_us: float
    main_thread_cpu_us: float
    process_cpu_us: float
    script_calls: float
    wait_calls: float = 0.0  # WAITs sent per completion (SVC_REDIS_MIN_REPLICAS)
    # of main_thread_cpu_us, what Redis spent at the rate it idled at just before the point
    # (timers, cluster bus, svc's background polling): a cost per second, not per completion
    idle_main_thread_cpu_us: float | None = None


def redis_cost(before: RedisSnapshot, after: RedisSnapshot, completions: int) -> RedisCost | None:
    """Per completion, between two snapshots around a point; None without a completion."""
    if completions <= 0:
        return None
    return RedisCost(
        script_us=round((after.script_usec - before.script_usec) / completions, 2),
        main_thread_cpu_us=round(
            (after.main_thread_cpu_s - before.main_thread_cpu_s) * 1e6 / completions, 2
        ),
        process_cpu_us=round((after.process_cpu_s - before.process_cpu_s) * 1e6 / completions, 2),
        script_calls=round((after.script_calls - before.script_calls) / completions, 3),
        wait_calls=round((after.wait_calls - before.wait_calls) / completions, 3),
    )


def idle_per_completion(
    idle_before: RedisSnapshot,
    idle_after: RedisSnapshot,
    idle_s: float,
    point_s: float,
    completions: int,
) -> float | None:
    """The main thread's CPU an idle Redis spends over a point of ``point_s`` seconds, per
    completion, in µs: its rate over an idle window of ``idle_s`` seconds (two snapshots)
    times the point's length; None without a window or a completion."""
    if idle_s <= 0 or completions <= 0:
        return None
    rate = max(0.0, idle_after.main_thread_cpu_s - idle_before.main_thread_cpu_s) / idle_s
    return round(rate * point_s * 1e6 / completions, 2)
