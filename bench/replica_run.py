"""svc measured on a Valkey primary with one replica (``bench.valkey_replica``), started with
``SVC_REDIS_MIN_REPLICAS`` 0 and 1 in turn (``bench.replicas``: the plan and the arithmetic);
then the money check of those accounts. ``python -m bench`` hands ``measure`` to
``bench.orchestrate.run``, which calls it after the cluster point, with svc's other
instances stopped.
"""

from __future__ import annotations

import itertools
from functools import partial
from pathlib import Path

import httpx
import redis

from bench import replicas
from bench.loadgen import LoadResult
from bench.mock_upstream import MockProcess
from bench.orchestrate import (
    Conservation,
    Point,
    Svc,
    base_aliases,
    check_conservation,
    measure_svc_point,
    start_svc,
    stop_process,
)
from bench.profiles import Profile
from bench.replicas import ReplicaCost, ReplicaFigures
from bench.valkey_replica import ValkeyReplicated


def read_replica_waits(svc: Svc) -> dict[str, int]:
    """svc's replica waits so far by result, from its ``GET /metrics``."""
    root = svc.base_url.removesuffix("/v1")
    response = httpx.get(f"{root}/metrics", timeout=30)
    response.raise_for_status()
    return replicas.replica_waits(response.text)


def measure(
    work: Path, mock: MockProcess, profile: Profile
) -> tuple[list[Point], Conservation, list[ReplicaCost]]:
    """The fast scenario at ``replica_concurrency`` on a throwaway primary and replica (a data
    folder of their own), each concurrency with ``SVC_REDIS_MIN_REPLICAS`` 0 and 1 in the
    order ``replicas.order`` gives, svc started afresh (same data folder) whenever the setting
    changes; Redis's cost read on the primary. Then the money check of those accounts, and
    the cost of the setting at each concurrency."""
    folder = work / "replicas"
    pair = ValkeyReplicated(folder / "valkey")
    pair.start()
    primary = redis.Redis(host="127.0.0.1", port=pair.primary_port)
    svc: Svc | None = None
    seen: dict[str, LoadResult] = {}
    points = []
    try:
        plan = replicas.order(profile.replica_concurrency)
        for min_replicas, run in itertools.groupby(plan, key=lambda point: point[0]):
            if svc is not None:
                stop_process(svc.process)
            svc = start_svc(
                folder,
                pair.url,
                mock.base_url,
                profile.workers,
                base_aliases(),
                {"SVC_REDIS_MIN_REPLICAS": str(min_replicas)},
            )
            for _, concurrency in run:
                point, pid = measure_svc_point(
                    svc,
                    primary,
                    "fast",
                    concurrency,
                    profile,
                    target=replicas.target(min_replicas),
                    replica_waits=partial(read_replica_waits, svc),
                )
                seen[pid] = point.load
                points.append(point)
        if svc is None:
            raise ValueError("no replica_concurrency to measure")
        conservation = check_conservation(svc, primary, seen, folder)
    finally:
        if svc is not None:
            stop_process(svc.process)
        primary.close()
        pair.stop()
    return points, conservation, replicas.costs(figures(points))


def figures(points: list[Point]) -> list[ReplicaFigures]:
    """The points measured on the replicated primary, as ``bench.replicas`` reads them, in
    the order measured; the other points are left out."""
    settings = {replicas.target(n): n for n in replicas.SETTINGS}
    out = []
    for p in points:
        if p.target not in settings or p.redis is None:
            continue
        waits = p.replica_waits or {}
        out.append(
            ReplicaFigures(
                min_replicas=settings[p.target],
                concurrency=p.load.concurrency,
                requests=p.load.total_requests,
                rps=p.load.rps,
                ttfb_p50_ms=p.load.ttfb_ms.p50,
                latency_p50_ms=p.load.latency_ms.p50,
                cpu_ms_per_request=p.server_cpu_ms_per_request,
                script_calls=p.redis.script_calls,
                wait_calls=p.redis.wait_calls,
                main_thread_cpu_us=p.redis.main_thread_cpu_us,
                waits_acked=waits.get("acked", 0),
                waits_short=waits.get("short", 0),
                errors=sum(p.load.errors.values()),
            )
        )
    return out
