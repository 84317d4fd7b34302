"""The ``svc admin`` subcommands as the command line sees them: their arguments, options and
help texts, and how an option's text reads as a request body field."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from app.keys.format import ENVIRONMENTS

DRIFT_EXIT = 3  # `svc admin reconcile` found drift (1: an error, 2: cannot start)


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


def _count_or_none(value: str) -> int | None:
    """``--rate-limit-rpm``, ``--max-credits-per-request``: a whole number (checked as the
    API checks it), or none."""
    return None if value.lower() in ("none", "null") else int(value)


# (option, field of the request body) of every key setting the CLI takes
_KEY_OPTIONS = (
    ("name", "name"),
    ("daily_cap", "daily_cap_credits"),
    ("expires_at", "expires_at"),
    ("allowed_models", "allowed_models"),
    ("rate_limit_rpm", "rate_limit_rpm"),
    ("max_credits_per_request", "max_credits_per_request"),
    ("role", "role"),
)


_KEY_SETTINGS: tuple[tuple[str, Callable[[str], Any], str], ...] = (
    ("--daily-cap", _cap, "credits per UTC day, or none (no cap)"),
    ("--expires-at", _expiry, "ISO 8601 time (2027-01-31T00:00:00Z), or none (never)"),
    ("--allowed-models", _models, "aliases separated by commas (svc-fast,svc-code), or all"),
    ("--rate-limit-rpm", _count_or_none, "requests the key may start in any minute, or none"),
    (
        "--max-credits-per-request",
        _count_or_none,
        "the most credits one request may cost, or none (no ceiling)",
    ),
    ("--role", str, "inference (the default: requests and reads) or admin (also manages keys)"),
)


def _add_key_options(parser: argparse.ArgumentParser) -> None:
    """The key settings of create-key and update-key; an option left out is not sent."""
    for flag, kind, help_text in _KEY_SETTINGS:
        parser.add_argument(flag, type=kind, default=argparse.SUPPRESS, help=help_text)


def key_fields(args: argparse.Namespace) -> dict[str, Any]:
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


def activity_params(args: argparse.Namespace) -> dict[str, str]:
    """The filters of `svc admin activity` given on the command line, as query parameters."""
    given = vars(args)
    return {option: given[option] for option, _ in _ACTIVITY_OPTIONS if given[option] is not None}


# the query parameters of GET /admin/v1/accounts, as options of `svc admin accounts`
_ACCOUNTS_OPTIONS = (
    ("query", "an account id (acct_...), a key's id (key_... or bare) or its last 4 characters"),
    ("limit", "accounts in the page (1-500; default 100)"),
    ("after", "the id of the last account of the previous page"),
    ("external_id", "only the account the app knows by this id"),
    ("sort", "the overview: every account's balance, debt and spend, by spend, balance or created"),
    ("days", "with --sort: the days the spend counts (1-366; default 30)"),
)


def accounts_params(args: argparse.Namespace) -> dict[str, str]:
    """The options of `svc admin accounts` given on the command line, as query parameters."""
    given = vars(args)
    return {option: given[option] for option, _ in _ACCOUNTS_OPTIONS if given[option] is not None}


# the query parameters of GET /admin/v1/audit, as options of `svc admin audit`
_AUDIT_OPTIONS = (
    ("account", "only this account's entries (acct_...)"),
    ("limit", "entries in the page (1-500; default 100)"),
    ("after", "the id of the last entry of the previous page"),
)


def audit_params(args: argparse.Namespace) -> dict[str, str]:
    """The options of `svc admin audit` given on the command line, as query parameters."""
    given = vars(args)
    return {option: given[option] for option, _ in _AUDIT_OPTIONS if given[option] is not None}


def add_admin_commands(admin: argparse.ArgumentParser) -> None:
    """The subcommands of ``svc admin``, in the order its help lists them."""
    ops = admin.add_subparsers(dest="op", required=True)
    _add_account_commands(ops)
    _add_lookup_commands(ops)
    _add_operator_commands(ops)
    _add_key_commands(ops)


def _add_account_commands(ops: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    create = ops.add_parser("create-account", help="create an account")
    create.add_argument(
        "--external-id", help="the app's own id of the account's user (unique; up to 128 chars)"
    )
    grant = ops.add_parser("grant", help="add purchased credits to an account")
    grant.add_argument("account_pid")
    grant.add_argument("credits", type=int)
    grant.add_argument("--reason", help="why (an order number, ...): kept with the grant")
    debit = ops.add_parser(
        "debit", help="take credits back from an account (the pools first, the rest as debt)"
    )
    debit.add_argument("account_pid")
    debit.add_argument("credits", type=int)
    debit.add_argument("--reason", help="why (a refund outside svc, ...): kept with the debit")
    ledger = ops.add_parser("ledger", help="an account's credit ledger, newest first (a page)")
    ledger.add_argument("account_pid")
    ledger.add_argument("--limit", help="entries in the page (1-500, default 100)")
    ledger.add_argument("--after", help="the id of the last entry of the previous page")
    bought = ops.add_parser("purchases", help="the purchases stores confirmed, newest first")
    bought.add_argument("--status", help="granted or unmatched (paid, not granted)")
    bought.add_argument("--limit", help="purchases in the page (1-500, default 100)")
    bought.add_argument("--after", help="the id of the last purchase of the previous page")
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


def _add_lookup_commands(ops: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Finding accounts and acting on one: its status, its keys."""
    accounts = ops.add_parser(
        "accounts", help="accounts, newest first (a page), or those --query finds"
    )
    for option, help_text in _ACCOUNTS_OPTIONS:
        accounts.add_argument(f"--{option.replace('_', '-')}", help=help_text)
    account = ops.add_parser(
        "account", help="an account: status, balance, keys (no secrets), usage today"
    )
    account.add_argument("account_pid")
    disable = ops.add_parser(
        "disable", help="refuse every key of an account (403 account_disabled), at once"
    )
    disable.add_argument("account_pid")
    enable = ops.add_parser("enable", help="serve a disabled account's keys again, at once")
    enable.add_argument("account_pid")
    revoke = ops.add_parser("revoke-key", help="revoke an account's API key, at once")
    revoke.add_argument("account_pid")
    revoke.add_argument("key_id", help="key_...")
    audit = ops.add_parser(
        "audit", help="operators' actions on money, keys and accounts' status, newest first"
    )
    for option, help_text in _AUDIT_OPTIONS:
        audit.add_argument(f"--{option}", help=help_text)


def _add_operator_commands(ops: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The usage flusher's and the ledger's: lag, flush, reconcile, rebuild-redis; and a
    Redis command of the operator's own."""
    books = ops.add_parser(
        "books", help="revenue, credits, upstream costs and margins of a range of UTC days"
    )
    books.add_argument(
        "--from", dest="from_day", help="the first day, YYYY-MM-DD (default: 30 days)"
    )
    books.add_argument("--to", dest="to_day", help="the last day, YYYY-MM-DD (default: today)")
    books.add_argument("--csv", action="store_true", help="CSV, one row per figure")
    ops.add_parser("usage-lag", help="usage events not yet flushed to the durable store")
    ops.add_parser("flush", help="flush pending usage events to the durable store now")
    rec = ops.add_parser(
        "reconcile",
        help="compare Redis balances and usage with the durable ledger "
        f"(exit {DRIFT_EXIT} on drift)",
    )
    rec.add_argument("--all", action="store_true", help="list every account, not only drift")
    rec.add_argument(
        "--repair",
        action="store_true",
        help="first apply the ledger entries still pending in Redis (each once)",
    )
    rebuild = ops.add_parser(
        "rebuild-redis", help="restore accounts, keys and balances into an empty Redis"
    )
    rebuild.add_argument(
        "--force",
        action="store_true",
        help="run against a Redis that holds accounts: write only what is missing",
    )
    redis = ops.add_parser(
        "redis",
        help="run one command against svc's Redis (the embedded Valkey too) and print its "
        "reply; an operator's tool: nothing is refused, writes included",
    )
    redis.add_argument("command", help="a Redis command (GET, HGETALL, SCAN, INFO, ...)")
    redis.add_argument(
        "args", nargs=argparse.REMAINDER, help="its arguments, as redis-cli takes them"
    )


def _add_key_commands(ops: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
