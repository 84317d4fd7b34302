"""``python -m bench``: the whole run (default), one load point, or the mock upstream."""

from __future__ import annotations

import argparse
import asyncio
import sys

import msgspec

from bench.profiles import build_parser, run_plan


def _run(args: argparse.Namespace) -> int:
    from bench import replica_run, report, scale_run
    from bench.orchestrate import run

    result = run(*run_plan(args), replicated=replica_run.measure, scaled=scale_run.measure)
    paths = report.write(result, args.out, png=not args.no_chart)
    print(report.markdown(result))
    print("written: " + ", ".join(str(p) for p in paths))
    checks = (result.conservation, result.cluster_conservation, result.replica_conservation)
    return 0 if all(c.ok for c in checks if c is not None) else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command in (None, "run"):
        if args.command is None:
            args = build_parser().parse_args(["run"])
        return _run(args)
    if args.command == "load":
        from bench.loadgen import LoadConfig, Requests, run_load
        from bench.looplag import no_full_collections

        cfg = msgspec.json.decode(args.config, type=LoadConfig)
        with_uvloop()
        no_full_collections()  # a pause of its own would count as the server's lag
        factory: Requests | None = None
        if cfg.client == "raw":  # the scale levels' lean client
            from bench.rawclient import raw_requests

            factory = raw_requests
        result = asyncio.run(run_load(cfg, factory))
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
