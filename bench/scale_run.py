"""The scale levels run (``bench.scale`` plans them): at each level the same streams straight
to the mock ("direct"), then through the floor (``bench.floor``: the bare relay with two
Redis round trips per stream, unless the profile skips the floor), then through svc started
afresh, in the same run, so that what svc adds to the streams' pace (inter-chunk p99, TTFB
p99) is read against a baseline measured beside it (``bench.goals.scale_goal``) rather than
against the nominal cadence, and beside what the stack under svc adds by itself (the floor's
own lag over direct: granian, uvloop, svc's upstream client and encoder, the machine).

Each side's load is shared over several load processes when the level is large
(``bench.shards``), and each side reports what the stack's other parts did meanwhile: each
load process's CPU share and event-loop lag, and the mock's loop lag (its ``GET /_lag``),
so that a lag can be placed on the load generator, the mock or svc. ``python -m bench`` hands
``measure`` to ``bench.orchestrate.run``.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable

import msgspec
import redis

from bench import floor, scale, shards
from bench.loadgen import LoadConfig, LoadResult
from bench.looplag import LagSummary, read_lag
from bench.measures import ProcessTree
from bench.orchestrate import (
    TOKENS_ALIAS,
    Point,
    Stack,
    Svc,
    base_aliases,
    free_port,
    open_reservations,
)
from bench.peers import PEER_API_KEY, running_peer
from bench.profiles import Profile

SETTLED_WAIT_S = 10.0
"""Seconds svc is given, once a scale level's load ended, to settle its last streams."""


def measure(
    stack: Stack, r: redis.Redis, profile: Profile, seen: dict[str, LoadResult]
) -> list[Point]:
    """The scale levels, each direct (svc stopped) and then on svc started afresh with the
    scale model and every stream of the level allowed on each worker at once; each svc
    level's key and load into ``seen``."""
    points = []
    model = f"bench-tokens{profile.scale_chunks}x{profile.scale_delay_ms}"
    for streams in profile.scale_streams:
        if problem := scale.fd_limit(streams):
            print(f"scale level {streams} skipped: {problem}", file=sys.stderr)
            continue
        stack.stop_svc()  # direct with nothing else running, as svc's side runs
        points.append(measure_direct(stack, model, streams, profile))
        if profile.floor:
            points.append(measure_floor(stack, model, streams, profile))
        # every stream of the level may land on one worker: the kernel spreads them unevenly
        svc = stack.start_svc({**base_aliases(), TOKENS_ALIAS: model}, worker_streams=streams)
        point, pid = measure_svc(svc, stack, r, streams, profile)
        seen[pid] = point.load
        points.append(point)
    return points


class Held(msgspec.Struct, kw_only=True):
    """What one side of a level measured."""

    load: LoadResult
    cpu_us_per_chunk: float | None  # the server's process tree, over the window
    idle_mb: list[float]  # each server process's RSS before the level
    peak_mb: list[float]
    streams: list[int]  # the most streams each worker held at once (svc)
    mock_lag: LagSummary | None  # the mock's loop lag over the window


def level_config(
    base_url: str, model: str, key: str, svc: bool, streams: int, profile: Profile
) -> LoadConfig:
    level = scale.plan(
        streams, profile.scale_chunks, profile.scale_delay_ms, profile.scale_duration_s
    )
    return LoadConfig(
        base_url=base_url,
        model=model,
        api_key=key,
        svc=svc,
        concurrency=streams,
        duration_s=level.duration_s,
        warmup_s=level.warmup_s,
        ramp_s=level.ramp_s,
        timeout_s=level.timeout_s,
        client="raw",  # about half aiohttp's CPU per chunk (bench.rawclient)
    )


def hold(
    cfg: LoadConfig,
    server: ProcessTree,
    rss_mb: Callable[[], list[float]],
    open_streams: Callable[[], list[int]],
    mock_url: str,
    processes: int,
) -> Held:
    """One side of a level: its load over ``processes`` load processes, the server's CPU
    sampled every half second (read over the window alone), its processes' RSS and streams
    held, and the mock's loop lag over the window."""
    idle = rss_mb()
    peak, held = list(idle), [0] * len(idle)
    cpu = scale.CpuSamples()
    ticks = itertools.count()
    every = 20 if cfg.concurrency > shards.STREAMS_PER_PROCESS else 8

    def sample() -> None:
        cpu.add(time.time(), server.cpu_seconds())
        for i, size in enumerate(rss_mb()[: len(peak)]):
            peak[i] = max(peak[i], size)
        # every 2 s, every 5 s above 2,500 streams: psutil reads the whole socket table for
        # each worker, which at 10,000 streams took a fifth of a core every 2 s
        if next(ticks) % every == every - 1:
            for i, count in enumerate(open_streams()[: len(held)]):
                held[i] = max(held[i], count)

    load = shards.run_sharded(cfg, processes, sample)
    window = load.window_wall
    window_cpu = cpu.between(*window) if window else None
    return Held(
        load=load,
        cpu_us_per_chunk=scale.us_per_chunk(window_cpu, load.chunks_per_s, load.window_s),
        idle_mb=idle,
        peak_mb=peak,
        streams=held,
        mock_lag=read_lag(mock_url, *window) if window else None,
    )


def _processes(streams: int, profile: Profile) -> int:
    return profile.scale_load_processes or shards.processes_for(streams)


def measure_direct(stack: Stack, model: str, streams: int, profile: Profile) -> Point:
    """A level's streams straight to the mock; the server CPU is the mock's own."""
    mock = stack.mock
    tree = ProcessTree(mock.pid)
    cfg = level_config(mock.base_url, model, "none", False, streams, profile)
    held = hold(
        cfg,
        tree,
        lambda: [round(tree.rss_bytes() / 2**20, 1)],
        lambda: [],
        mock.base_url,
        _processes(streams, profile),
    )
    return Point(
        scenario="scale",
        target="direct",
        load=held.load,
        server_cpu_us_per_chunk=held.cpu_us_per_chunk,
        mock_lag=held.mock_lag,
    )


def measure_floor(stack: Stack, model: str, streams: int, profile: Profile) -> Point:
    """A level's streams through the floor, with svc stopped: the bare relay on as many
    workers, each allowed every stream of the level at once, as svc's are."""
    with running_peer(
        floor.FLOOR,
        stack.work,
        stack.mock,
        [model],
        profile.workers,
        free_port(),
        stack.valkey.tcp_url,
        worker_streams=streams,
    ) as running:
        tree = ProcessTree(running.pid)
        cfg = level_config(running.base_url, model, PEER_API_KEY, False, streams, profile)
        held = hold(
            cfg,
            tree,
            lambda: [round(tree.rss_bytes() / 2**20, 1)],
            lambda: [],
            stack.mock.base_url,
            _processes(streams, profile),
        )
    return Point(
        scenario="scale",
        target=floor.FLOOR,
        load=held.load,
        server_cpu_us_per_chunk=held.cpu_us_per_chunk,
        mock_lag=held.mock_lag,
    )


def measure_svc(
    svc: Svc, stack: Stack, r: redis.Redis, streams: int, profile: Profile
) -> tuple[Point, str]:
    """A level's streams through svc, with its workers' RSS and the reservations left open
    once they ended."""
    pid, key = svc.new_funded_key()
    cfg = level_config(svc.base_url, TOKENS_ALIAS, key, True, streams, profile)
    held = hold(
        cfg,
        ProcessTree(svc.process.pid),
        svc.rss_mb,
        svc.open_streams,
        stack.mock.base_url,
        _processes(streams, profile),
    )
    point = Point(
        scenario="scale",
        target="svc",
        load=held.load,
        server_cpu_us_per_chunk=held.cpu_us_per_chunk,
        rss_mb_per_worker=held.peak_mb,
        idle_rss_mb_per_worker=held.idle_mb,
        streams_per_worker=held.streams,
        rss_kb_per_stream=scale.kb_per_stream(held.idle_mb, held.peak_mb, streams),
        reservations_open_after=_settled(r),
        mock_lag=held.mock_lag,
    )
    return point, pid


def _settled(r: redis.Redis) -> int:
    """The reservations still open once every one closed, or ``SETTLED_WAIT_S`` passed."""
    deadline = time.monotonic() + SETTLED_WAIT_S
    while (still := open_reservations(r)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return still
