"""The stack's floor as a target of the bench: the bare relay of ``python -m tests.perf.floor``
making the two Redis round trips every metered request needs, served by granian as ``svc
serve`` serves svc, measured in the same run as svc (``--peer floor``; the default profile
runs it on the ``fast`` and ``tokens`` scenarios).

The relay itself (``tests/perf/bare_relay.py``) is made of svc's internals, which the benchmark
may not import: the bench only starts it, by its module path, in granian processes of their
own, as it starts ``svc serve``. What it costs per request and per relayed chunk is the floor
svc's targets are held against: the least a request that holds credits before it starts and
settles them after can cost on this stack (svc's upstream client, chunk encoder and RSGI
writes, and two round trips on svc's pipelined Redis connection, to the bench's Valkey over
TCP, as svc's).

This module holds the command and the environment (``tests.perf.floor`` starts the same
relay with them), so that tests can check them without starting anything.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOOR = "floor"
RELAY_APP = "tests.perf.bare_relay:app"
UPSTREAM_ENV = "FLOOR_UPSTREAM_URL"  # the upstream's base URL, ending in /v1
REDIS_ENV = "FLOOR_REDIS_URL"  # set: two round trips per request on this Redis
STREAMS_ENV = "FLOOR_WORKER_STREAMS"  # connections to the upstream per worker, as svc's provider
WORKER_STREAMS = 2048  # svc's default worker_streams: granian's backpressure per worker
SCENARIOS = ("fast", "tokens")
"""Where the floor is measured: a request's floor (``fast``: 20 chunks in one write, all
overhead) and a relayed chunk's (``tokens``)."""


def relay_command(port: int, workers: int, worker_streams: int = WORKER_STREAMS) -> list[str]:
    """granian serving the bare relay on 127.0.0.1:``port`` as ``svc serve`` serves svc: RSGI,
    uvloop, no websockets, the same backpressure and backlog per worker (``worker_streams``:
    svc's ``SVC_WORKER_STREAMS``, which a scale level raises to its streams)."""
    return [
        *(sys.executable, "-m", "granian", "--interface", "rsgi", "--workers", str(workers)),
        *("--loop", "uvloop", "--no-ws", "--host", "127.0.0.1", "--port", str(port)),
        *("--backpressure", str(worker_streams), "--backlog", str(worker_streams)),
        *("--log-level", "warning", "--no-access-log", RELAY_APP),
    ]


def relay_env(
    upstream_url: str, redis_url: str | None, worker_streams: int = WORKER_STREAMS
) -> dict[str, str]:
    """This environment with the checkout first on the path (the relay's module lives in
    ``tests/``), the upstream, the Redis of the round trips when given, and the connections
    to the upstream each worker may hold (at least its streams, as a scale level sets svc's
    provider's ``max_connections``)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        **os.environ,
        "PYTHONPATH": path,
        UPSTREAM_ENV: upstream_url,
        STREAMS_ENV: str(worker_streams),
    }
    if redis_url:
        env[REDIS_ENV] = redis_url
    else:
        env.pop(REDIS_ENV, None)
    return env
