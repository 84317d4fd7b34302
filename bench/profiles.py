"""What a run measures: the profiles (how big a run is, and which peers it measures svc beside),
the arguments of ``python -m bench`` that change one, and the peers a run starts.

Nothing here starts anything (``bench.orchestrate`` does), so that tests can import it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import msgspec

from bench import compiled_peers as compiled
from bench import floor

DESCRIPTION = "``python -m bench``: the whole run (default), one load point, or the mock upstream."
DEFAULT_OUT = Path(__file__).resolve().parent / "results"


class Profile(msgspec.Struct, frozen=True, kw_only=True):
    """How big a run is, and which peers it measures svc beside."""

    workers: int = 2
    concurrency: tuple[int, ...] = (1, 10, 50, 200)
    scenarios: tuple[str, ...] = ("fast", "slow")
    duration_s: float = 8.0
    warmup_s: float = 2.0
    memory_streams: int = 1000  # slow streams held open per worker for the RSS check; 0 = skip
    memory_duration_s: float = 8.0
    monitor_requests: int = 50  # requests sampled with MONITOR for the wire-command count
    client: str = "aiohttp"
    # tokens: an upstream writing each content chunk on its own, tokens_delay_ms apart
    tokens_concurrency: tuple[int, ...] = (200, 1000)
    tokens_chunks: int = 50
    tokens_delay_ms: int = 10
    responses_concurrency: tuple[int, ...] = (50,)
    # the Responses point is measured this many times, each beside a chat point of its own
    # (the fast scenario through chat completions), in alternating order: the target is the
    # median of the pairs' ratios, so neither the machine's drift nor one noisy point
    # decides it
    responses_pairs: int = 3
    # the Messages API point: measured as the Responses point is, in pairs of its own
    messages_concurrency: tuple[int, ...] = (50,)
    messages_pairs: int = 3
    # the floor (bench.floor: the bare relay with two Redis round trips per request) measured
    # in the same run, on the fast and tokens points, after svc
    floor: bool = True
    # svc on a 3-primary Valkey Cluster, fast scenario at these concurrencies: Redis's cost
    # per completion there against the single Valkey's (empty: skipped)
    cluster_concurrency: tuple[int, ...] = (50,)
    # svc on a Valkey primary with one replica (bench.replicas), fast scenario at these
    # concurrencies with SVC_REDIS_MIN_REPLICAS 0 and 1: what waiting for the replica after
    # each settle costs per completion (empty: skipped)
    replica_concurrency: tuple[int, ...] = (1, 50)
    # scale (bench.scale): one instance holding this many slow streams at once, each level on
    # svc started afresh; a stream is scale_chunks content chunks scale_delay_ms apart, and
    # each level is measured for scale_duration_s once its streams are all open (empty: none)
    scale_streams: tuple[int, ...] = (200, 2000, 10000)
    scale_chunks: int = 20
    scale_delay_ms: int = 1000
    scale_duration_s: float = 20.0
    # load processes sharing each level's streams (bench.shards); 0: as many as the level
    # needs (``bench.shards.processes_for``: one up to 2,500 streams)
    scale_load_processes: int = 0
    # other gateways measured on the same points after svc (bench.peers; ``--peer NAME`` adds
    # one, ``--no-peers`` empties this); one that cannot be installed here is skipped
    peers: tuple[str, ...] = ()


# What a default run measures svc beside: LiteLLM, Portkey, TensorZero (also with its rate
# limit in the bench's Valkey) and Envoy.
DEFAULT_PEERS = (
    compiled.LITELLM,
    "portkey",
    compiled.TENSORZERO,
    compiled.TENSORZERO_VALKEY,
    compiled.ENVOY,
)


PROFILES = {
    "default": Profile(
        scenarios=("fast", "responses", "messages", "slow", "tokens"), peers=DEFAULT_PEERS
    ),
    "smoke": Profile(
        workers=1,
        concurrency=(1, 4),
        scenarios=("fast", "responses", "messages", "tokens"),
        responses_concurrency=(4,),
        responses_pairs=1,
        messages_concurrency=(4,),
        messages_pairs=1,
        tokens_concurrency=(4,),
        tokens_chunks=10,
        tokens_delay_ms=5,
        duration_s=1.0,
        warmup_s=0.3,
        memory_streams=20,
        memory_duration_s=1.0,
        monitor_requests=5,
        floor=False,
        cluster_concurrency=(),
        replica_concurrency=(4,),
        scale_streams=(8,),
        scale_chunks=3,
        scale_delay_ms=100,
        scale_duration_s=1.0,
        peers=(),
    ),
}


def run_peers(profile: Profile, peers: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The peers a run measures, in order, each once: the profile's, then ``peers``; the floor
    first when the profile has it and neither names it (the nearest to svc's points in time)."""
    wanted = tuple(dict.fromkeys((*profile.peers, *peers)))
    if profile.floor and floor.FLOOR not in wanted:
        wanted = (floor.FLOOR, *wanted)
    return wanted


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def _words(text: str) -> tuple[str, ...]:
    return tuple(x for x in text.split(",") if x)


def build_parser() -> argparse.ArgumentParser:
    """``python -m bench``'s arguments."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="start everything, measure, write the report (default)")
    run.add_argument("--profile", choices=sorted(PROFILES), default="default")
    run.add_argument("--workers", type=int, help="svc worker processes")
    run.add_argument("--concurrency", type=_ints, help="e.g. 1,10,50,200")
    run.add_argument("--scenarios", type=_words, help="fast,responses,messages,slow,tokens")
    run.add_argument("--tokens-concurrency", type=_ints, help="tokens scenario, e.g. 200,1000")
    run.add_argument("--duration", type=float, help="measured seconds per point")
    run.add_argument("--warmup", type=float, help="warm-up seconds per point")
    run.add_argument(
        "--memory-streams", type=int, help="slow streams held open per worker for the RSS check"
    )
    run.add_argument(
        "--scale-streams",
        type=_ints,
        help="open slow streams held at once on one instance, e.g. 200,2000,10000 (0: none)",
    )
    run.add_argument(
        "--scale-load-processes",
        type=int,
        help="load processes sharing each scale level's streams (0: by the level's size)",
    )
    run.add_argument("--client", choices=["aiohttp", "openai"], help="load generator client")
    run.add_argument(
        "--no-floor", action="store_true", help="skip the floor (bare relay + 2 Redis round trips)"
    )
    run.add_argument(
        "--cluster-concurrency",
        type=_ints,
        help="fast points of svc on a 3-primary Valkey Cluster, e.g. 50 (0: none)",
    )
    run.add_argument(
        "--replica-concurrency",
        type=_ints,
        help="fast points of svc on a primary with one replica, SVC_REDIS_MIN_REPLICAS 0 "
        "and 1, e.g. 1,50 (0: none)",
    )
    run.add_argument(
        "--peer",
        action="append",
        default=[],
        help="also measure: litellm, portkey, tensorzero, tensorzero-valkey, envoy, floor",
    )
    run.add_argument(
        "--no-peers",
        action="store_true",
        help=f"skip the profile's peers (the default profile's: {', '.join(DEFAULT_PEERS)}); "
        "those named with --peer still run",
    )
    run.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder of the results")
    run.add_argument("--no-chart", action="store_true", help="skip the PNG")

    load = sub.add_parser("load", help="one closed-loop point; prints a JSON result")
    load.add_argument("--config", required=True, help="a LoadConfig as JSON")

    mock = sub.add_parser("mock", help="run the mock upstream in the foreground")
    mock.add_argument("--host", default="127.0.0.1")
    mock.add_argument("--port", type=int, default=9000)
    mock.add_argument("--chunks", type=int, default=20)
    mock.add_argument("--delay-ms", type=float, default=0.0)
    return parser


def run_plan(args: argparse.Namespace) -> tuple[Profile, tuple[str, ...]]:
    """The profile a ``run`` measures, the flags applied, and the peers named with ``--peer``
    (``run_peers`` adds the profile's)."""
    overrides = {
        "workers": args.workers,
        "concurrency": args.concurrency,
        "scenarios": args.scenarios,
        "tokens_concurrency": args.tokens_concurrency,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "memory_streams": args.memory_streams,
        "scale_streams": (
            tuple(n for n in args.scale_streams if n > 0)
            if args.scale_streams is not None
            else None
        ),
        "scale_load_processes": args.scale_load_processes,
        "client": args.client,
        "floor": False if args.no_floor else None,
        "peers": () if args.no_peers else None,
        "cluster_concurrency": (
            tuple(c for c in args.cluster_concurrency if c > 0)
            if args.cluster_concurrency is not None
            else None
        ),
        "replica_concurrency": (
            tuple(c for c in args.replica_concurrency if c > 0)
            if args.replica_concurrency is not None
            else None
        ),
    }
    profile = msgspec.structs.replace(
        PROFILES[args.profile], **{k: v for k, v in overrides.items() if v is not None}
    )
    return profile, tuple(args.peer)
