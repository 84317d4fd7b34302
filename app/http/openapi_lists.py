"""The query parameters of the paged lists, as the OpenAPI document names them (their
handlers parse them themselves: ``app.usage.activity``, ``app.accounts.lookup``,
``app.accounts.audit``, ``app.accounts.ledger_pages``)."""

from __future__ import annotations

from litestar.enums import ParamType
from litestar.openapi.spec import OpenAPIFormat, OpenAPIType, Parameter, Schema

from app.accounts.external import MAX_EXTERNAL_ID
from app.accounts.ledger_pages import KINDS as LEDGER_KINDS
from app.accounts.lookup import DEFAULT_LIMIT as ACCOUNTS_DEFAULT_LIMIT
from app.accounts.lookup import MAX_LIMIT as ACCOUNTS_MAX_LIMIT
from app.accounts.lookup import MAX_QUERY_CHARS as ACCOUNTS_MAX_QUERY
from app.books.overview import DEFAULT_DAYS as OVERVIEW_DEFAULT_DAYS
from app.books.overview import MAX_DAYS as OVERVIEW_MAX_DAYS
from app.books.overview import SORTS as OVERVIEW_SORTS
from app.usage.activity import DEFAULT_LIMIT as ACTIVITY_DEFAULT_LIMIT
from app.usage.activity import MAX_LIMIT as ACTIVITY_MAX_LIMIT
from app.usage.export import FORMATS

ACTIVITY_PARAMS = [
    Parameter(
        name="limit",
        param_in=ParamType.QUERY,
        required=False,
        description=(
            f"Rows in the page (default {ACTIVITY_DEFAULT_LIMIT}); with `format=csv`, rows "
            "in the export (default: all of them)."
        ),
        schema=Schema(type=OpenAPIType.INTEGER, minimum=1, maximum=ACTIVITY_MAX_LIMIT),
    ),
    Parameter(
        name="after",
        param_in=ParamType.QUERY,
        required=False,
        description="The `id` of the last row of the previous page (its `last_id`).",
        schema=Schema(type=OpenAPIType.STRING),
    ),
    Parameter(
        name="key_id",
        param_in=ParamType.QUERY,
        required=False,
        description="Only the requests made with this key (`key_…`).",
        schema=Schema(type=OpenAPIType.STRING),
    ),
    Parameter(
        name="model",
        param_in=ParamType.QUERY,
        required=False,
        description="Only the requests this model served.",
        schema=Schema(type=OpenAPIType.STRING),
    ),
    Parameter(
        name="day",
        param_in=ParamType.QUERY,
        required=False,
        description="Only the requests that started on this UTC day.",
        schema=Schema(type=OpenAPIType.STRING, format=OpenAPIFormat.DATE),
    ),
    Parameter(
        name="format",
        param_in=ParamType.QUERY,
        required=False,
        description=(
            "`csv`: the rows as `text/csv` (a header row, then one row per request, newest "
            "first, `created` as an ISO 8601 UTC time)."
        ),
        schema=Schema(type=OpenAPIType.STRING, enum=list(FORMATS), default="json"),
    ),
]

ACCOUNTS_PARAMS = [
    Parameter(
        name="query",
        param_in=ParamType.QUERY,
        required=False,
        description=(
            "Only the accounts it names: an account id (`acct_…`), the id of one of its keys "
            "(`key_…`, or the bare id), or a key's last four characters (`last4`)."
        ),
        schema=Schema(type=OpenAPIType.STRING, max_length=ACCOUNTS_MAX_QUERY),
    ),
    Parameter(
        name="external_id",
        param_in=ParamType.QUERY,
        required=False,
        description="Only the account the app knows by this `external_id` (none: an empty list).",
        schema=Schema(type=OpenAPIType.STRING, min_length=1, max_length=MAX_EXTERNAL_ID),
    ),
    Parameter(
        name="limit",
        param_in=ParamType.QUERY,
        required=False,
        description=f"Accounts in the page (default {ACCOUNTS_DEFAULT_LIMIT}).",
        schema=Schema(type=OpenAPIType.INTEGER, minimum=1, maximum=ACCOUNTS_MAX_LIMIT),
    ),
    Parameter(
        name="after",
        param_in=ParamType.QUERY,
        required=False,
        description="The `id` of the last account of the previous page (its `last_id`).",
        schema=Schema(type=OpenAPIType.STRING),
    ),
    Parameter(
        name="sort",
        param_in=ParamType.QUERY,
        required=False,
        description=(
            "The overview instead of a page: every account's balance, debt and live spend "
            "over `days`, the first `limit` by spend, balance or creation (largest, newest "
            "first), with the totals of the credits outstanding and of the debt."
        ),
        schema=Schema(type=OpenAPIType.STRING, enum=list(OVERVIEW_SORTS)),
    ),
    Parameter(
        name="days",
        param_in=ParamType.QUERY,
        required=False,
        description=f"With `sort`: the UTC days the spend counts, today's included (default "
        f"{OVERVIEW_DEFAULT_DAYS}).",
        schema=Schema(type=OpenAPIType.INTEGER, minimum=1, maximum=OVERVIEW_MAX_DAYS),
    ),
]

AUDIT_PARAMS = [
    Parameter(
        name="account",
        param_in=ParamType.QUERY,
        required=False,
        description="Only the entries of this account (`acct_…`).",
        schema=Schema(type=OpenAPIType.STRING, max_length=ACCOUNTS_MAX_QUERY),
    ),
    Parameter(
        name="limit",
        param_in=ParamType.QUERY,
        required=False,
        description=f"Entries in the page (default {ACCOUNTS_DEFAULT_LIMIT}).",
        schema=Schema(type=OpenAPIType.INTEGER, minimum=1, maximum=ACCOUNTS_MAX_LIMIT),
    ),
    Parameter(
        name="after",
        param_in=ParamType.QUERY,
        required=False,
        description="The `id` of the last entry of the previous page (its `last_id`).",
        schema=Schema(type=OpenAPIType.STRING),
    ),
]

LEDGER_PARAMS = [
    *AUDIT_PARAMS[1:],  # limit and after: a ledger is one account's already
    Parameter(
        name="kind",
        param_in=ParamType.QUERY,
        required=False,
        description=f"Only the entries of these kinds, comma-separated: {', '.join(LEDGER_KINDS)}.",
        schema=Schema(type=OpenAPIType.STRING),
    ),
]
