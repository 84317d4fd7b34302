"""The ``svc`` command: ``svc serve``, ``svc admin …`` and ``svc --version``.

``svc serve`` checks what it can before it hands over to granian: the settings, that the
port can be listened on, the models file, the data folder, Redis (it answers, and it does
not evict) and the durable store. A failure prints one or two lines to stderr — what failed
and where, then how to fix it — and exits with status 2 before anything is served
(``SVC_LOG_LEVEL=DEBUG`` prints the traceback above them). "serving on …" is logged once
granian listens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import ipaddress
import logging
import logging.config
import math
import os
import re
import shutil
import socket
import sys
import tempfile
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

# first, before anything imports redis-py: granian forks the workers from this process, so a
# module imported here is in every worker's memory too (the metrics SDK and psutil, 2.6 MB)
from app.kv import redis_import  # noqa: F401

# isort: split
from app.admin.actions import admin
from app.admin.commands import add_admin_commands
from app.core.allocator import give_back_large_blocks
from app.core.errors import (
    ConfigError,
    ModelsFileError,
    ProxyConfigError,
    SettingsError,
    StartupError,
    StoreError,
)
from app.core.logs import granian_log_config
from app.core.metrics import installed_version
from app.core.settings import ENV_PREFIX, Settings
from app.ops.resolve import resolve
from app.runtime import bootstrap_dev, load_models, open_services, short_pools
from app.spotlights.admob import ad_units

log = logging.getLogger("svc.serve")

CANNOT_START = 2
"""``svc serve``'s exit status when it stops before serving."""

FIXES: tuple[tuple[type[Exception], str], ...] = (
    (
        ModelsFileError,
        "correct the file, or set SVC_MODELS_FILE to the right one (unset: the built-in aliases)",
    ),
    (ProxyConfigError, "correct that variable, or unset it"),
    (StoreError, "check SVC_DATABASE_URL, and that the database runs and lets svc in"),
)
"""The way out of the start-up failures whose messages say only what and where (svc's own
start-up errors say how to fix them too)."""

_MAX_MESSAGE = 600
_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="svc", description="Credit-metered chat gateway.")
    parser.add_argument("--version", action="version", version=f"svc {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP server under granian")
    serve.add_argument("--host", help="bind address (default SVC_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default SVC_PORT or 8000)")
    serve.add_argument("--workers", type=int, help="worker processes (default: CPU count)")

    admin = sub.add_parser("admin", help="operator commands; print one JSON object")
    add_admin_commands(admin)
    return parser


def one_line(exc: BaseException) -> str:
    """An exception's message on one line, cut short, with no closing full stop. granian's
    errors carry a Rust stack backtrace when ``RUST_BACKTRACE`` is set: it is left out."""
    text = " ".join(str(exc).split("Stack backtrace:", 1)[0].split()).rstrip(".")
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def failure_lines(exc: BaseException) -> list[str]:
    """What ``svc serve`` prints when it cannot start: what failed and where, then how to
    fix it (on the first line when the message says it already)."""
    if isinstance(exc, ConfigError | StoreError):
        lines = [f"svc: cannot start: {one_line(exc)}"]
        lines += [f"svc: {fix}" for cls, fix in FIXES if isinstance(exc, cls)][:1]
        return lines
    return [
        f"svc: cannot start: {type(exc).__name__}: {one_line(exc)}",
        "svc: this failure is not one svc knows; SVC_LOG_LEVEL=DEBUG prints its traceback",
    ]


def debug_requested() -> bool:
    """``SVC_LOG_LEVEL=DEBUG``, read from the environment itself: the settings may be what
    failed."""
    return os.environ.get(f"{ENV_PREFIX}LOG_LEVEL", "").strip().upper() == "DEBUG"


def cannot_start(exc: BaseException) -> int:
    """Print why ``svc serve`` stops (its traceback first when asked for) and return the
    exit status."""
    if debug_requested():
        traceback.print_exception(exc, file=sys.stderr)
    for line in failure_lines(exc):
        print(line, file=sys.stderr)
    sys.stderr.flush()
    return CANNOT_START


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def port_message(host: str, port: int, exc: OSError) -> str:
    """Why ``host:port`` cannot be listened on, and what to do about it."""
    address = _address(host, port)
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{address} is in use: another process listens there. Stop it, or set SVC_PORT "
            "(or --port) to a free port"
        )
    if exc.errno == errno.EACCES:
        return (
            f"cannot listen on {address}: permission denied (a port below 1024 needs "
            "privileges). Set SVC_PORT (or --port) to 1024 or above"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"cannot listen on {address}: no network interface here has that address. Set "
            "SVC_HOST (or --host) to one of this machine's addresses (0.0.0.0: all of them)"
        )
    return (
        f"cannot listen on {address} ({exc.strerror or exc}). Check SVC_HOST and SVC_PORT "
        "(or --host and --port)"
    )


def check_port(host: str, port: int) -> None:
    """Raise ``StartupError`` unless ``host:port`` can be listened on.

    A socket is bound and closed again, with ``SO_REUSEADDR`` as granian sets it: a port
    held only by connections in TIME_WAIT passes, as it would for granian. granian also sets
    ``SO_REUSEPORT``, which lets a second server of the same user share a port another
    listens on; the check leaves it out, so a second ``svc serve`` on a port in use stops
    here instead of splitting the traffic with the first. What takes the port between
    this check and granian's bind is caught when granian fails (``granian_failure``)."""
    try:
        version = ipaddress.ip_address(host).version
    except ValueError as exc:
        raise SettingsError(
            f"invalid SVC_* setting: SVC_HOST={host[:60]!r} is not an IP address (granian "
            "listens on addresses, not names). Use e.g. 127.0.0.1, 0.0.0.0 or ::"
        ) from exc
    family = socket.AF_INET6 if version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise StartupError(port_message(host, port, exc)) from exc


def granian_failure(exc: Exception, host: str, port: int) -> StartupError:
    """granian stopped before it listened: its socket's OS error (``… (os error 98)``) as
    ``check_port`` words it, or its message."""
    match = _OS_ERROR.search(str(exc))
    if match is not None:
        code = int(match.group(1))
        message = port_message(host, port, OSError(code, os.strerror(code)))
    else:
        message = f"granian could not start on {_address(host, port)}: {one_line(exc)}"
    failure = StartupError(message)
    failure.__cause__ = exc
    return failure


async def _prepare(settings: Settings) -> str | None:
    # the workers set their own tracing up once forked: this process exports nothing
    services = await open_services(settings, require_redis=True)
    try:
        return await bootstrap_dev(services) if settings.dev_bootstrap else None
    finally:
        await services.close()


def _fresh_metrics_dir(settings: Settings) -> tuple[Settings, str | None]:
    """The workers' shared metrics directory, emptied: counters start at zero with the
    server. Returns the directory to remove at exit when svc made it."""
    try:
        if settings.metrics_dir:
            for stale in Path(settings.metrics_dir).glob("*.db"):
                stale.unlink()
            return settings, None
        made = tempfile.mkdtemp(prefix="svc-metrics-")
    except OSError as exc:
        where = exc.filename or settings.metrics_dir or tempfile.gettempdir()
        raise StartupError(
            f"the metrics directory cannot be made ready ({where}: {exc.strerror or exc}). "
            "Set SVC_METRICS_DIR to a directory svc can write"
        ) from exc
    return msgspec.structs.replace(settings, metrics_dir=made), made


SETTLE_MARGIN_S = 15
"""After the grace period a worker cuts its streams, settles them and flushes usage; granian
kills a worker still running this much later (the sweeper then refunds what it held)."""


def kill_timeout_s(grace_s: float) -> int:
    """granian's workers_kill_timeout: whole seconds, 1 to 1800."""
    return min(1800, math.ceil(max(0.0, grace_s)) + SETTLE_MARGIN_S)


def serve_settings(args: argparse.Namespace, environ: dict[str, str]) -> Settings:
    """The ``SVC_*`` settings, with ``--host``, ``--port`` and ``--workers`` in place of
    their variables (and checked alike)."""
    given = {
        ENV_PREFIX + name.upper(): str(value)
        for name in ("host", "port", "workers")
        if (value := getattr(args, name)) is not None
    }
    try:
        return Settings.from_env({**environ, **given})
    except ValueError as exc:
        # a ValueError there: app.core.settings imports none of svc's (bench reads it)
        raise SettingsError(str(exc)) from exc


ADMOB_KEYS_URL_SETTING = ENV_PREFIX + "ADMOB_KEYS_URL"


def admob_left_off(settings: Settings, environ: Mapping[str, str]) -> bool:
    """Whether the operator set ``SVC_ADMOB_KEYS_URL`` (AdMob is meant to reward) but listed
    no ad unit in ``SVC_ADMOB_AD_UNITS``: the callback route answers 404 until it does."""
    return bool(environ.get(ADMOB_KEYS_URL_SETTING)) and not ad_units(settings.admob_ad_units)


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """Only errors from ``logger`` for the time being."""
    quieted = logging.getLogger(logger)
    level = quieted.level
    quieted.setLevel(logging.ERROR)
    try:
        yield
    finally:
        quieted.setLevel(level)


def _get_ready(
    args: argparse.Namespace, cleanup: contextlib.ExitStack
) -> tuple[Settings, dict[str, Any]]:
    """Everything ``svc serve`` checks and prepares before granian listens, cheapest
    first; raises what stops it. What it starts (the embedded Valkey, the metrics
    directory) ``cleanup`` undoes."""
    environ = dict(os.environ)
    settings = serve_settings(args, environ)
    log_config = granian_log_config(settings.log_level)
    logging.config.dictConfig(log_config)
    if admob_left_off(settings, environ):
        log.warning(
            "%s is set but SVC_ADMOB_AD_UNITS is not: GET /v1/spotlights/admob answers 404 "
            "until it lists your rewarded ad units (Google signs every publisher's callbacks "
            "with the same keys, so no other ad unit may reward)",
            ADMOB_KEYS_URL_SETTING,
        )
    check_port(settings.host, settings.port)
    catalog = load_models(settings)  # a broken file stops svc before Valkey starts
    for name, bound in short_pools(catalog, settings.worker_streams).items():
        log.warning(
            "provider %s: max_connections %d is below SVC_WORKER_STREAMS %d: streams past it "
            "wait for a free connection and fail after its connect_timeout_s; raise it",
            name,
            bound,
            settings.worker_streams,
        )
    settings, owner = resolve(settings)
    if owner is not None:
        cleanup.callback(owner.stop)
    settings, made_metrics_dir = _fresh_metrics_dir(settings)
    if made_metrics_dir is not None:
        cleanup.callback(shutil.rmtree, made_metrics_dir, ignore_errors=True)
    with _quiet("psycopg.pool"):  # its retries say what the StoreError will say once
        dev_key = asyncio.run(_prepare(settings))
    if dev_key is not None:
        # the key itself goes only to the 0600 file: logs are no place for a secret
        log.info("created a dev account; its live key is in %s/dev-key.txt", settings.data_dir)
    os.environ.update(settings.env_vars())
    give_back_large_blocks()  # before the workers fork: they inherit it
    return settings, log_config


def run_granian(settings: Settings, log_config: dict[str, Any]) -> int:
    """Serve under granian until stopped; a failure before it listens is a start-up
    failure like the others."""
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces, Loops

    workers = settings.workers or os.cpu_count() or 1
    listening = False

    def announce() -> None:  # granian's startup hook: it listens now
        nonlocal listening
        listening = True
        address = _address(settings.host, settings.port)
        log.info("serving on http://%s/v1 with %d worker(s)", address, workers)

    try:
        server = Granian(
            "app.rsgi:app",
            address=settings.host,
            port=settings.port,
            interface=Interfaces.RSGI,  # the chat streams' interface; Litestar is adapted
            http=HTTPModes.auto if settings.http2 else HTTPModes.http1,
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
        )
        server.on_startup(announce)
        server.serve()
    except Exception as exc:
        if listening:
            raise
        return cannot_start(granian_failure(exc, settings.host, settings.port))
    return 0


def serve(args: argparse.Namespace) -> int:
    """Check and prepare everything, then run granian until stopped."""
    with contextlib.ExitStack() as cleanup:
        try:
            settings, log_config = _get_ready(args, cleanup)
        except Exception as exc:
            return cannot_start(exc)
        return run_granian(settings, log_config)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    return admin(args)


if __name__ == "__main__":
    sys.exit(main())
