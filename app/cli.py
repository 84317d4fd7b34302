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
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from app.chat.catalog import ModelsFileError
from app.core.allocator import give_back_large_blocks
from app.core.clock import DAY_S
from app.core.errors import ApiError
from app.core.logs import granian_log_config
from app.core.settings import Settings
from app.keys.format import ENVIRONMENTS
from app.runtime import Services, StartupError, bootstrap_dev, open_services, public_error, resolve

AdminOp = Callable[[Services], Awaitable[Any]]
log = logging.getLogger("svc.serve")
DRIFT_EXIT = 3  # `svc admin reconcile` found drift (1: an error, 2: cannot start)


class ExitWith(msgspec.Struct):
    """An admin result printed as ``body`` with a non-zero exit code."""

    body: Any
    code: int


def _cap(value: str) -> int | None:
    if value.lower() in ("none", "null"):
        return None
    cap = int(value)
    if cap < 0:
        raise argparse.ArgumentTypeError("the daily cap is an integer >= 0, or 'none'")
    return cap


def _expiry(value: str) -> str | None:
    """``--expires-at``: an ISO 8601 time (checked as the API checks it), or none."""
    return None if value.lower() in ("none", "null") else value


def _models(value: str) -> list[str] | None:
    """``--allowed-models``: aliases separated by commas ("" for none), or all."""
    if value.lower() == "all":
        return None
    return [alias.strip() for alias in value.split(",") if alias.strip()]


def _rpm(value: str) -> int | None:
    """``--rate-limit-rpm``: requests a minute (checked as the API checks it), or none."""
    return None if value.lower() in ("none", "null") else int(value)


# (option, field of the request body) of every key setting the CLI takes
_KEY_OPTIONS = (
    ("name", "name"),
    ("daily_cap", "daily_cap_credits"),
    ("expires_at", "expires_at"),
    ("allowed_models", "allowed_models"),
    ("rate_limit_rpm", "rate_limit_rpm"),
    ("role", "role"),
)


_KEY_SETTINGS: tuple[tuple[str, Callable[[str], Any], str], ...] = (
    ("--daily-cap", _cap, "credits per UTC day, or none (no cap)"),
    ("--expires-at", _expiry, "ISO 8601 time (2027-01-31T00:00:00Z), or none (never)"),
    ("--allowed-models", _models, "aliases separated by commas (svc-fast,svc-code), or all"),
    ("--rate-limit-rpm", _rpm, "requests the key may start in any minute, or none (no limit)"),
    ("--role", str, "admin (manages keys and webhooks; the default here) or inference"),
)


def _add_key_options(parser: argparse.ArgumentParser) -> None:
    """The key settings of create-key and update-key; an option left out is not sent."""
    for flag, kind, help_text in _KEY_SETTINGS:
        parser.add_argument(flag, type=kind, default=argparse.SUPPRESS, help=help_text)


def _key_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The key settings given on the command line, as request body fields."""
    given = vars(args)
    return {field: given[option] for option, field in _KEY_OPTIONS if option in given}


# the query parameters of GET /v1/activity, as options of `svc admin activity`
_ACTIVITY_OPTIONS = (
    ("limit", "rows (1-500; default 100, with --csv all)"),
    ("after", "the id of the last row of the previous page"),
    ("key_id", "only this key's requests (key_...)"),
    ("model", "only the requests this model served"),
    ("day", "only the requests that started on this UTC day (YYYY-MM-DD)"),
)


class CsvLines(msgspec.Struct):
    """An admin result printed as CSV text, a line at a time."""

    lines: AsyncIterator[str]


def _activity_op(args: argparse.Namespace) -> AdminOp:
    from app.usage.activity import parse_filter
    from app.usage.export import activity_csv

    async def activity(s: Services) -> Any:
        await s.accounts.require_account(args.account_pid)
        given = vars(args)
        params = {o: given[o] for o, _ in _ACTIVITY_OPTIONS if given[o] is not None}
        wanted = parse_filter(params, csv_export=args.csv)
        if not args.csv:
            return await s.activity.page(args.account_pid, args.environment, wanted)
        query = await s.activity.query(args.account_pid, args.environment, wanted)
        return CsvLines(activity_csv(s.activity.rows(query, wanted.limit)))

    return activity


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="svc", description="Credit-metered chat gateway.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP server under granian")
    serve.add_argument("--host", help="bind address (default SVC_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default SVC_PORT or 8000)")
    serve.add_argument("--workers", type=int, help="worker processes (default: CPU count)")

    admin = sub.add_parser("admin", help="operator commands; print one JSON object")
    ops = admin.add_subparsers(dest="op", required=True)
    ops.add_parser("create-account", help="create an account")
    grant = ops.add_parser("grant", help="add purchased credits to an account")
    grant.add_argument("account_pid")
    grant.add_argument("credits", type=int)
    credits = ops.add_parser("credits", help="an account's credit balance")
    credits.add_argument("account_pid")
    spot = ops.add_parser("spotlight", help="reward a verified spotlight view (earned credits)")
    spot.add_argument("account_pid")
    spot.add_argument("view_id")
    inspect = ops.add_parser("inspect", help="an account as Redis holds it, read-only")
    inspect.add_argument("account_pid")
    activity = ops.add_parser(
        "activity", help="an account's settled requests, newest first (a page, or --csv)"
    )
    activity.add_argument("account_pid")
    for option, help_text in _ACTIVITY_OPTIONS:
        activity.add_argument(f"--{option.replace('_', '-')}", help=help_text)
    activity.add_argument("--environment", choices=ENVIRONMENTS, default="live")
    activity.add_argument("--csv", action="store_true", help="every row the filters name, as CSV")
    hooks = ops.add_parser("webhooks", help="an account's webhooks, or one's recent deliveries")
    hooks.add_argument("account_pid")
    hooks.add_argument("--deliveries", metavar="WEBHOOK_ID", help="wh_...: its deliveries")
    ops.add_parser("usage-lag", help="usage events not yet flushed to the durable store")
    ops.add_parser("flush", help="flush pending usage events to the durable store now")
    rec = ops.add_parser(
        "reconcile",
        help="compare Redis balances and usage with the durable ledger "
        f"(exit {DRIFT_EXIT} on drift)",
    )
    rec.add_argument("--all", action="store_true", help="list every account, not only drift")
    rebuild = ops.add_parser(
        "rebuild-redis", help="restore accounts, keys and balances into an empty Redis"
    )
    rebuild.add_argument(
        "--force",
        action="store_true",
        help="run against a Redis that holds accounts: write only what is missing",
    )
    key = ops.add_parser("create-key", help="create an API key (the secret is shown once)")
    key.add_argument("account_pid")
    key.add_argument("--name", required=True)
    key.add_argument("--environment", choices=ENVIRONMENTS, default="live")
    _add_key_options(key)
    update = ops.add_parser(
        "update-key", help="change an API key's settings (at once, on every worker)"
    )
    update.add_argument("account_pid")
    update.add_argument("key_id", help="key_...")
    update.add_argument("--name", default=argparse.SUPPRESS, help="the new name")
    _add_key_options(update)
    rotate = ops.add_parser(
        "rotate-key", help="replace an API key with a new secret (shown once), same settings"
    )
    rotate.add_argument("account_pid")
    rotate.add_argument("key_id", help="key_...")
    rotate.add_argument(
        "--grace-seconds",
        type=int,
        default=0,
        help="how long the old key keeps working (0 to 604800; default 0: it stops now)",
    )
    rotate.add_argument(
        "--role", default=argparse.SUPPRESS, help="the new key's role (default: the old key's)"
    )
    return parser


def _key_ops(args: argparse.Namespace) -> dict[str, AdminOp]:
    """The admin operations on API keys."""
    from app.accounts.manage import KeyCreateRequest, KeyRotateRequest, KeyUpdateRequest
    from app.core.validation import convert_fields

    async def create_key(s: Services) -> Any:
        fields = {"daily_cap_credits": None, **_key_fields(args), "environment": args.environment}
        req = convert_fields(fields, KeyCreateRequest)
        return await s.accounts.create_key(args.account_pid, req)

    async def update_key(s: Services) -> Any:
        req = convert_fields(_key_fields(args), KeyUpdateRequest)
        return await s.accounts.update_key(args.account_pid, args.key_id, req)

    async def rotate_key(s: Services) -> Any:
        fields = {"grace_seconds": args.grace_seconds, **_key_fields(args)}
        req = convert_fields(fields, KeyRotateRequest)
        return await s.accounts.rotate_key(
            args.account_pid, args.key_id, req.grace_seconds, role=req.role
        )

    return {"create-key": create_key, "update-key": update_key, "rotate-key": rotate_key}


def _admin_op(args: argparse.Namespace) -> AdminOp:
    from app.accounts.manage import GrantRequest
    from app.core.validation import convert_fields

    async def create_account(s: Services) -> Any:
        return {"account_pid": await s.accounts.create_account()}

    async def grant(s: Services) -> Any:
        req = convert_fields({"credits": args.credits}, GrantRequest)
        return await s.accounts.grant_purchased(args.account_pid, req.credits)

    async def credits(s: Services) -> Any:
        return await s.accounts.balance(args.account_pid)

    async def spotlight(s: Services) -> Any:
        return await s.spotlights.reward(args.account_pid, args.view_id)

    async def webhooks(s: Services) -> Any:
        await s.accounts.require_account(args.account_pid)
        if args.deliveries:
            return await s.webhooks.deliveries(args.account_pid, args.deliveries)
        return await s.webhooks.list(args.account_pid)

    async def usage_lag(s: Services) -> Any:
        return await s.flusher.lag()

    async def flush(s: Services) -> Any:
        return {"flushed_events": await s.flusher.flush_all(), "lag": await s.flusher.lag()}

    async def inspect(s: Services) -> Any:
        from app.ops.inspect import inspect_account

        return await inspect_account(s.redis, s.layout, s.store, args.account_pid, s.clock)

    async def reconcile(s: Services) -> Any:
        from app.ops.reconcile import reconcile

        report = await reconcile(
            s.redis,
            s.layout,
            s.store,
            now=s.clock(),
            earned_ttl_s=s.settings.earned_expiry_days * DAY_S,
            usage_retention_s=s.settings.usage_day_ttl_s,
            everything=args.all,
        )
        return ExitWith(report, DRIFT_EXIT) if report.accounts_with_drift else report

    async def rebuild_redis(s: Services) -> Any:
        from app.ops.reconcile import rebuild_redis

        return await rebuild_redis(
            s.money,
            s.key_records,
            s.usage_counts,
            s.store,
            now=s.clock(),
            earned_ttl_s=s.settings.earned_expiry_days * DAY_S,
            force=args.force,
        )

    ops: dict[str, AdminOp] = {
        "reconcile": reconcile,
        "rebuild-redis": rebuild_redis,
        "inspect": inspect,
        "usage-lag": usage_lag,
        "flush": flush,
        "create-account": create_account,
        "grant": grant,
        "spotlight": spotlight,
        "credits": credits,
        "activity": _activity_op(args),
        "webhooks": webhooks,
        **_key_ops(args),
    }
    return ops[args.op]


async def _run_admin(settings: Settings, op: AdminOp) -> int:
    try:
        services = await open_services(settings)
    except StartupError as exc:
        print(f"svc: {exc}", file=sys.stderr)
        return 2
    try:
        result = await op(services)
        if isinstance(result, CsvLines):
            async for line in result.lines:
                sys.stdout.write(line)
            return 0
    except Exception as exc:
        error: ApiError = public_error(exc)
        sys.stdout.buffer.write(error.body() + b"\n")
        return 1
    finally:
        await services.close()
    code = 0
    if isinstance(result, ExitWith):
        result, code = result.body, result.code
    sys.stdout.buffer.write(msgspec.json.encode(result) + b"\n")
    return code


def admin(args: argparse.Namespace) -> int:
    """Run one admin operation against Redis and the store directly (server up or not)."""
    settings, owner = resolve(Settings.from_env())
    try:
        return asyncio.run(_run_admin(settings, _admin_op(args)))
    finally:
        if owner is not None:
            owner.stop()


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
