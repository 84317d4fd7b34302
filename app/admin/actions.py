"""What each ``svc admin`` subcommand runs, and how its result is printed: one JSON object
(or CSV lines; ``redis``: the reply, as JSON), exit 0; an API error's body (``redis``: Redis's
error reply), exit 1; svc cannot start, exit 2; reconcile's drift, ``DRIFT_EXIT``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import msgspec

from app.admin.commands import (
    DRIFT_EXIT,
    accounts_params,
    activity_params,
    audit_params,
    key_fields,
)
from app.core.clock import DAY_S
from app.core.errors import (
    ApiError,
    ConfigError,
    ErrorBody,
    ErrorDetail,
    RedisReplyError,
    SettingsError,
    StartupError,
    StoreError,
)
from app.core.operator import CLI, Operator, acting
from app.core.settings import Settings
from app.kv.client import REDIS_ERRORS, open_redis, readable, run_command
from app.kv.fields import ACCOUNT_ACTIVE, ACCOUNT_DISABLED
from app.ops.resolve import database_url, resolve
from app.runtime import Services, open_services, public_error
from app.store import open_store

AdminOp = Callable[[Services], Awaitable[Any]]


class ExitWith(msgspec.Struct):
    """An admin result printed as ``body`` with a non-zero exit code."""

    body: Any
    code: int


class CsvLines(msgspec.Struct):
    """An admin result printed as CSV text, a line at a time."""

    lines: AsyncIterator[str]


def _activity_op(args: argparse.Namespace) -> AdminOp:
    from app.usage.activity import parse_filter
    from app.usage.export import activity_csv

    async def activity(s: Services) -> Any:
        await s.accounts.require_account(args.account_pid)
        wanted = parse_filter(activity_params(args), csv_export=args.csv)
        if not args.csv:
            return await s.activity.page(args.account_pid, args.environment, wanted)
        query = await s.activity.query(args.account_pid, args.environment, wanted)
        return CsvLines(activity_csv(s.activity.rows(query, wanted.limit)))

    return activity


def _key_ops(args: argparse.Namespace) -> dict[str, AdminOp]:
    """The admin operations on API keys."""
    from app.accounts.bodies import KeyCreateRequest, KeyRotateRequest, KeyUpdateRequest
    from app.core.validation import convert_fields

    async def create_key(s: Services) -> Any:
        fields = {"daily_cap_credits": None, **key_fields(args), "environment": args.environment}
        req = convert_fields(fields, KeyCreateRequest)
        return await s.api_keys.create_key(args.account_pid, req)

    async def update_key(s: Services) -> Any:
        req = convert_fields(key_fields(args), KeyUpdateRequest)
        return await s.api_keys.update_key(args.account_pid, args.key_id, req)

    async def rotate_key(s: Services) -> Any:
        fields = {"grace_seconds": args.grace_seconds, **key_fields(args)}
        req = convert_fields(fields, KeyRotateRequest)
        return await s.api_keys.rotate_key(
            args.account_pid, args.key_id, req.grace_seconds, role=req.role
        )

    return {"create-key": create_key, "update-key": update_key, "rotate-key": rotate_key}


def _lookup_ops(args: argparse.Namespace) -> dict[str, AdminOp]:
    """Finding accounts and acting on one (the admin API's account routes)."""
    from app.accounts.lookup import parse_account_filter
    from app.ops.lookup import account_detail

    async def accounts(s: Services) -> Any:
        from app.books.overview import account_overview, parse_overview

        params = accounts_params(args)
        overview = parse_overview(params)
        if overview is not None:
            return await account_overview(s.store, s.money, overview, s.clock())
        return await s.accounts.find_accounts(parse_account_filter(params))

    async def account(s: Services) -> Any:
        return await account_detail(s.accounts, s.api_keys, s.usage, args.account_pid, s.clock())

    def set_status(status: str) -> AdminOp:
        async def change(s: Services) -> Any:
            await s.accounts.set_status(args.account_pid, status)
            return await account_detail(
                s.accounts, s.api_keys, s.usage, args.account_pid, s.clock()
            )

        return change

    async def revoke_key(s: Services) -> Any:
        await s.accounts.require_account(args.account_pid)
        return await s.api_keys.revoke_key(args.account_pid, args.key_id)

    return {
        "accounts": accounts,
        "account": account,
        "disable": set_status(ACCOUNT_DISABLED),
        "enable": set_status(ACCOUNT_ACTIVE),
        "revoke-key": revoke_key,
    }


def _ledger_ops(args: argparse.Namespace) -> dict[str, AdminOp]:
    """The operations on Redis against the durable ledger: inspect, reconcile, rebuild."""

    async def inspect(s: Services) -> Any:
        from app.ops.inspect import inspect_account

        return await inspect_account(s.redis, s.layout, s.store, args.account_pid, s.clock)

    async def reconcile(s: Services) -> Any:
        from app.ops.reconcile import reconcile

        repaired = restored = 0
        if args.repair:
            repaired = await s.ledger.repair_pending(older_than_s=0)
            restored = await s.ledger.lost.recheck_since(0)  # every applied entry
        report = await reconcile(
            s.redis,
            s.layout,
            s.store,
            now=s.clock(),
            earned_ttl_s=s.settings.earned_expiry_days * DAY_S,
            usage_retention_s=s.settings.usage_day_ttl_s,
            everything=args.all,
            repaired_entries=repaired,
            restored_entries=restored,
        )
        return ExitWith(report, DRIFT_EXIT) if report.accounts_with_drift else report

    async def rebuild_redis(s: Services) -> Any:
        from app.ops.rebuild import rebuild_redis

        return await rebuild_redis(
            s.money,
            s.key_records,
            s.usage_counts,
            s.store,
            now=s.clock(),
            earned_ttl_s=s.settings.earned_expiry_days * DAY_S,
            force=args.force,
            usage_retention_s=s.settings.usage_day_ttl_s,
        )

    return {"reconcile": reconcile, "rebuild-redis": rebuild_redis, "inspect": inspect}


def _money_ops(args: argparse.Namespace) -> dict[str, AdminOp]:
    """Credits in and out: grants, debits, the ledger and the stores' purchases."""
    from app.accounts.bodies import DebitRequest, GrantRequest
    from app.core.validation import convert_fields

    async def grant(s: Services) -> Any:
        req = convert_fields({"credits": args.credits, "reason": args.reason}, GrantRequest)
        return await s.accounts.grant_purchased(args.account_pid, req.credits, reason=req.reason)

    async def debit(s: Services) -> Any:
        req = convert_fields({"credits": args.credits, "reason": args.reason}, DebitRequest)
        return await s.accounts.debit(args.account_pid, req.credits, reason=req.reason)

    async def ledger(s: Services) -> Any:
        from app.accounts.ledger_pages import ledger_list, parse_ledger_filter

        await s.accounts.require_account(args.account_pid)
        params = {k: v for k, v in (("limit", args.limit), ("after", args.after)) if v is not None}
        return await ledger_list(s.store, args.account_pid, parse_ledger_filter(params))

    async def purchases(s: Services) -> Any:
        from app.purchases.listing import parse_purchase_filter, purchase_list

        named = (("status", args.status), ("limit", args.limit), ("after", args.after))
        params = {k: v for k, v in named if v is not None}
        return await purchase_list(s.store, parse_purchase_filter(params))

    async def books(s: Services) -> Any:
        from app.books.report import book_days, books_csv, read_books
        from app.books.value import configured_value

        named = (("from", args.from_day), ("to", args.to_day))
        days = book_days({k: v for k, v in named if v is not None}, s.clock())
        found = await read_books(s.store, days, configured_value(s.settings.credit_value))
        return CsvLines(_lines(books_csv(found))) if args.csv else found

    return {
        "grant": grant,
        "debit": debit,
        "ledger": ledger,
        "purchases": purchases,
        "books": books,
    }


async def _lines(lines: Iterable[str]) -> AsyncIterator[str]:
    for line in lines:
        yield line


def _admin_op(args: argparse.Namespace) -> AdminOp:
    from app.accounts.bodies import AccountCreateRequest, validate_account_create
    from app.core.validation import convert_fields

    async def create_account(s: Services) -> Any:
        fields = {"external_id": args.external_id}
        req = validate_account_create(convert_fields(fields, AccountCreateRequest))
        return {"account_pid": await s.accounts.create_account(req.external_id)}

    async def audit(s: Services) -> Any:
        from app.accounts.audit import audit_page, parse_audit_filter

        return await audit_page(s.store, parse_audit_filter(audit_params(args)))

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

    ops: dict[str, AdminOp] = {
        **_ledger_ops(args),
        "usage-lag": usage_lag,
        "flush": flush,
        "create-account": create_account,
        **_money_ops(args),
        "audit": audit,
        "spotlight": spotlight,
        "credits": credits,
        "activity": _activity_op(args),
        "webhooks": webhooks,
        **_key_ops(args),
        **_lookup_ops(args),
    }
    return ops[args.op]


def _print(result: Any, code: int) -> int:
    sys.stdout.buffer.write(msgspec.json.encode(result) + b"\n")
    return code


async def _run_redis(settings: Settings, command: str, args: list[str]) -> int:
    """``svc admin redis``: one command on a client of its own (no store, no scripts, no
    start-up checks: it also serves to repair what those would refuse), its reply as JSON;
    an error reply as an error body with Redis's message, exit 1."""
    redis = open_redis(settings, 1, name="svc-admin")
    try:
        return _print(readable(await run_command(redis, command, args)), 0)
    except RedisReplyError as exc:
        detail = ErrorDetail(message=str(exc), type="redis_error", param=None, code="redis_error")
        return _print(ErrorBody(error=detail), 1)
    except REDIS_ERRORS as exc:
        sys.stdout.buffer.write(public_error(exc).body() + b"\n")
        return 1
    finally:
        await redis.aclose()


async def _run_admin(settings: Settings, op: AdminOp) -> int:
    try:
        services = await open_services(settings)
    except StartupError as exc:
        print(f"svc: {exc}", file=sys.stderr)
        return 2
    try:
        # what the command changes is audited as the CLI's (app.accounts.audit)
        with acting(Operator(actor=CLI)):
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
    if isinstance(result, ExitWith):
        return _print(result.body, result.code)
    return _print(result, 0)


async def require_store(settings: Settings) -> None:
    """Raise ``StartupError`` (one line naming where svc looked and the settings that
    choose it) unless the store holds svc's schema: only ``svc serve`` creates one, so an
    admin command run outside its data folder does not answer from a new, empty store.
    Creates nothing: asked before ``resolve`` makes the data folder, its secrets and an
    embedded Valkey."""
    try:
        store = open_store(database_url(settings))
    except ValueError as exc:
        raise SettingsError(f"SVC_DATABASE_URL: {exc}") from exc
    try:
        found = await store.has_schema()
    except StoreError as exc:
        raise StartupError(f"the store cannot be reached ({exc})") from exc
    finally:
        await store.close()
    if found:
        return
    where = (
        "the PostgreSQL database SVC_DATABASE_URL names"
        if settings.database_url and not settings.database_url.lower().startswith("sqlite")
        else database_url(settings).removeprefix("sqlite:///")
    )
    raise StartupError(
        f"no svc store at {where} (only `svc serve` creates one): run this where svc "
        "keeps its data, or set SVC_DATA_DIR or SVC_DATABASE_URL to svc's"
    )


def admin(args: argparse.Namespace) -> int:
    """Run one admin operation against Redis and the store directly (server up or not)."""
    if args.op != "redis":  # the one command that needs no store
        try:
            asyncio.run(require_store(Settings.from_env()))
        except ConfigError as exc:
            print(f"svc: {exc}", file=sys.stderr)
            return 2
    settings, owner = resolve(Settings.from_env())
    try:
        if args.op == "redis":
            return asyncio.run(_run_redis(settings, args.command, args.args))
        return asyncio.run(_run_admin(settings, _admin_op(args)))
    finally:
        if owner is not None:
            owner.stop()
