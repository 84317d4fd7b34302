"""The load generator in processes of its own: one (``run_in_process``), or several sharing one
point's streams (``run_sharded``), their results merged into one.

One process runs one event loop on one core: at 10,000 open streams (10,000 chunks a second
to parse and check) its loop falls behind and the gaps it measures grow by its own lag, not
the server's. Several processes, each with a share of the streams, all started at the same
wall-clock time so that their windows line up, keep each loop's share small; the merged
percentiles are read from every process's samples together (a percentile of percentiles
would be no percentile at all), and each process's CPU and loop lag is kept beside them.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import msgspec

from bench.loadgen import LoadConfig, LoadResult, RawSamples, _percentiles

# streams one load process is given at most: a loop parsing 2,500 chunks a second stays
# far below a core (measured at 10,000 streams: bench/README.md, "Scale: open streams")
STREAMS_PER_PROCESS = 2500
MAX_PROCESSES = 4  # the machine has 2 cores; past a few, processes only contend
START_LEAD_S = 3.0  # the processes start their load this long after they are spawned


def processes_for(streams: int) -> int:
    """How many load processes share ``streams`` streams."""
    return max(1, min(MAX_PROCESSES, math.ceil(streams / STREAMS_PER_PROCESS)))


def split(streams: int, processes: int) -> list[int]:
    """``streams`` shared out over ``processes``, as evenly as whole streams go."""
    base, extra = divmod(streams, processes)
    return [base + (1 if i < extra else 0) for i in range(processes) if base or i < extra]


def _spawn(
    cfg: LoadConfig, env: Mapping[str, str] | None, out: IO[bytes], err: IO[bytes]
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench", "load", "--config", msgspec.json.encode(cfg).decode()],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        stdout=out,
        stderr=err,
    )


def run_in_processes(
    cfgs: list[LoadConfig],
    sample: Callable[[], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> list[LoadResult]:
    """Run each config in a fresh process (``python -m bench load``) at once and read their
    JSON results; ``sample`` is called about every 0.25 s while they run. Each writes to a
    file of its own, not a pipe: with its samples its JSON runs to megabytes, which a pipe
    would have to be drained of while the others run."""
    lead = max((c.start_at - time.time() for c in cfgs if c.start_at is not None), default=0)
    longest = max(c.warmup_s + c.duration_s + c.timeout_s for c in cfgs)
    deadline = time.monotonic() + max(0.0, lead) + longest + 60
    with contextlib.ExitStack() as files:
        outs = [files.enter_context(tempfile.TemporaryFile()) for _ in cfgs]
        errs = [files.enter_context(tempfile.TemporaryFile()) for _ in cfgs]
        processes = [_spawn(c, env, o, e) for c, o, e in zip(cfgs, outs, errs, strict=True)]
        try:
            while any(p.poll() is None for p in processes):
                if time.monotonic() > deadline:
                    raise RuntimeError("the load generator did not finish in time")
                if sample is not None:
                    sample()
                time.sleep(0.25)
            if sample is not None:  # once more after the end: the window's end is inside
                sample()
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        results = []
        for process, out, err in zip(processes, outs, errs, strict=True):
            if process.returncode != 0:
                err.seek(0)
                raise RuntimeError(f"the load generator failed:\n{err.read().decode()[-3000:]}")
            out.seek(0)
            results.append(msgspec.json.decode(out.read(), type=LoadResult))
    return results


def run_in_process(
    cfg: LoadConfig,
    sample: Callable[[], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> LoadResult:
    """One load process (``run_in_processes``)."""
    return run_in_processes([cfg], sample, env)[0]


def run_sharded(
    cfg: LoadConfig, processes: int, sample: Callable[[], None] | None = None
) -> LoadResult:
    """One point's streams shared out over ``processes`` load processes, merged."""
    if processes <= 1:
        return run_in_process(cfg, sample)
    start_at = time.time() + START_LEAD_S
    cfgs = [
        msgspec.structs.replace(cfg, concurrency=n, start_at=start_at, raw=True)
        for n in split(cfg.concurrency, processes)
    ]
    return merge(run_in_processes(cfgs, sample))


def merge(results: list[LoadResult]) -> LoadResult:
    """Several processes' results of one point as one: counts and rates summed over the
    window they share, percentiles from their samples together, each process's CPU and
    loop lag kept in order."""
    if len(results) == 1:
        return msgspec.structs.replace(results[0], raw=None)
    raws = [r.raw for r in results]
    if any(raw is None for raw in raws):
        raise ValueError("merging needs every process's samples (LoadConfig.raw)")
    samples = RawSamples(
        [x for raw in raws if raw for x in raw.ttfb_ms],
        [x for raw in raws if raw for x in raw.latency_ms],
        [x for raw in raws if raw for x in raw.inter_chunk_ms],
    )
    walls = [r.window_wall for r in results if r.window_wall is not None]
    window_wall = (max(w[0] for w in walls), min(w[1] for w in walls)) if walls else None
    window = min(r.window_s for r in results)
    requests = sum(r.requests for r in results)
    measured = requests + sum(sum(r.errors.values()) for r in results)
    cpu_share = sum(r.client_cpu_share for r in results)
    return LoadResult(
        concurrency=sum(r.concurrency for r in results),
        client=results[0].client,
        requests=requests,
        rps=round(sum(r.rps for r in results), 1),
        ttfb_ms=_percentiles(samples.ttfb_ms),
        latency_ms=_percentiles(samples.latency_ms),
        errors=dict(sum((Counter(r.errors) for r in results), Counter())),
        errors_outside_window=dict(
            sum((Counter(r.errors_outside_window) for r in results), Counter())
        ),
        client_cpu_ms_per_request=round(cpu_share * window * 1000 / max(1, measured), 3),
        client_cpu_share=round(cpu_share, 3),
        window_s=window,
        total_requests=sum(r.total_requests for r in results),
        total_ok=sum(r.total_ok for r in results),
        credits_used=sum(r.credits_used for r in results),
        inter_chunk_ms=_percentiles(samples.inter_chunk_ms),
        content_chunks=sum(r.content_chunks for r in results),
        chunks_per_s=round(sum(r.chunks_per_s for r in results), 1),
        total_content_chunks=sum(r.total_content_chunks for r in results),
        window_wall=window_wall,
        processes=[p for r in results for p in r.processes],
    )
