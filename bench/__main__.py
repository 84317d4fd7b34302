"""``python -m bench``: the whole run (default), one load point, or the mock upstream."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import msgspec

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def _words(text: str) -> tuple[str, ...]:
    return tuple(x for x in text.split(",") if x)


def build_parser() -> argparse.ArgumentParser:
    from bench.orchestrate import PROFILES

    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
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
        "--peer",
        action="append",
        default=[],
        help="also measure: litellm, portkey, tensorzero, tensorzero-valkey, envoy, floor",
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


def _run(args: argparse.Namespace) -> int:
    from bench import report
    from bench.orchestrate import PROFILES, run

    overrides = {
        "workers": args.workers,
        "concurrency": args.concurrency,
        "scenarios": args.scenarios,
        "tokens_concurrency": args.tokens_concurrency,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "memory_streams": args.memory_streams,
        "client": args.client,
        "floor": False if args.no_floor else None,
        "cluster_concurrency": (
            tuple(c for c in args.cluster_concurrency if c > 0)
            if args.cluster_concurrency is not None
            else None
        ),
    }
    profile = msgspec.structs.replace(
        PROFILES[args.profile], **{k: v for k, v in overrides.items() if v is not None}
    )
    result = run(profile, tuple(args.peer))
    paths = report.write(result, args.out, png=not args.no_chart)
    print(report.markdown(result))
    print("written: " + ", ".join(str(p) for p in paths))
    cluster = result.cluster_conservation
    return 0 if result.conservation.ok and (cluster is None or cluster.ok) else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command in (None, "run"):
        if args.command is None:
            args = build_parser().parse_args(["run"])
        return _run(args)
    if args.command == "load":
        from bench.loadgen import LoadConfig, run_load

        cfg = msgspec.json.decode(args.config, type=LoadConfig)
        with_uvloop()
        result = asyncio.run(run_load(cfg))
        sys.stdout.buffer.write(msgspec.json.encode(result) + b"\n")
        return 0
    from bench.mock_upstream import Options, _serve

    print(f"mock upstream on http://{args.host}:{args.port}/v1", flush=True)
    _serve(Options(args.chunks, args.delay_ms, True, None), args.host, args.port, None)
    return 0


def with_uvloop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    uvloop.install()


if __name__ == "__main__":
    sys.exit(main())
