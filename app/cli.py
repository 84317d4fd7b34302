"""The ``svc`` command: ``svc serve`` and ``svc admin …``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import logging.config
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

import msgspec

from app.admin.actions import admin
from app.admin.commands import add_admin_commands
from app.core.allocator import give_back_large_blocks
from app.core.errors import ModelsFileError, StartupError
from app.core.logs import granian_log_config
from app.core.settings import Settings
from app.runtime import bootstrap_dev, open_services, resolve

log = logging.getLogger("svc.serve")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="svc", description="Credit-metered chat gateway.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP server under granian")
    serve.add_argument("--host", help="bind address (default SVC_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default SVC_PORT or 8000)")
    serve.add_argument("--workers", type=int, help="worker processes (default: CPU count)")

    admin = sub.add_parser("admin", help="operator commands; print one JSON object")
    add_admin_commands(admin)
    return parser


async def _prepare(settings: Settings) -> str | None:
    services = await open_services(settings)
    try:
        return await bootstrap_dev(services) if settings.dev_bootstrap else None
    finally:
        await services.close()


def _fresh_metrics_dir(settings: Settings) -> tuple[Settings, str | None]:
    """The workers' shared metrics directory, emptied: counters start at zero with the
    server. Returns the directory to remove at exit when svc made it."""
    if settings.metrics_dir:
        for stale in Path(settings.metrics_dir).glob("*.db"):
            stale.unlink()
        return settings, None
    made = tempfile.mkdtemp(prefix="svc-metrics-")
    return msgspec.structs.replace(settings, metrics_dir=made), made


SETTLE_MARGIN_S = 15
"""After the grace period a worker cuts its streams, settles them and flushes usage; granian
kills a worker still running this much later (the sweeper then refunds what it held)."""


def kill_timeout_s(grace_s: float) -> int:
    """granian's workers_kill_timeout: whole seconds, 1 to 1800."""
    return min(1800, math.ceil(max(0.0, grace_s)) + SETTLE_MARGIN_S)


def serve(args: argparse.Namespace) -> int:
    """Resolve the configuration, prepare storage, then run granian until stopped."""
    from granian import Granian
    from granian.constants import Interfaces, Loops

    base = Settings.from_env()
    overrides = {k: v for k in ("host", "port", "workers") if (v := getattr(args, k)) is not None}
    log_config = granian_log_config(base.log_level)
    logging.config.dictConfig(log_config)
    settings, owner = resolve(msgspec.structs.replace(base, **overrides))
    settings, made_metrics_dir = _fresh_metrics_dir(settings)
    try:
        try:
            dev_key = asyncio.run(_prepare(settings))
        except (ModelsFileError, StartupError) as exc:
            log.error("cannot start: %s", exc)
            return 2
        if dev_key is not None:
            # the key itself goes only to the 0600 file: logs are no place for a secret
            log.info("created a dev account; its live key is in %s/dev-key.txt", settings.data_dir)
        os.environ.update(settings.env_vars())
        give_back_large_blocks()  # before the workers fork: they inherit it
        workers = settings.workers or os.cpu_count() or 1
        log.info(
            "serving on http://%s:%s/v1 with %d worker(s)", settings.host, settings.port, workers
        )
        Granian(
            "app.rsgi:app",
            address=settings.host,
            port=settings.port,
            interface=Interfaces.RSGI,  # the chat streams' interface; Litestar is adapted
            websockets=False,  # svc has no websocket route
            workers=workers,
            backpressure=settings.worker_streams,
            backlog=max(1024, settings.worker_streams),  # the kernel's accept queue
            loop=Loops.uvloop,
            log_access=False,
            log_dictconfig=log_config,
            respawn_failed_workers=True,  # a crashed worker is replaced; the sweeper
            # refunds what it held
            workers_kill_timeout=kill_timeout_s(settings.shutdown_grace_s),
        ).serve()
    finally:
        if owner is not None:
            owner.stop()
        if made_metrics_dir is not None:
            shutil.rmtree(made_metrics_dir, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    return admin(args)


if __name__ == "__main__":
    sys.exit(main())
