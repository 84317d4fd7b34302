"""The query parameters of the lists and reports, declared once: Litestar documents them
from these declarations, and the handlers get them from the same ones.

A handler gets a parameter as its raw text (None: not given) and hands it to the rule's
owner (``app.usage.activity``, ``app.accounts.lookup``, ``app.accounts.audit``,
``app.accounts.ledger_pages``, ``app.purchases.listing``, ``app.books``), which checks it and
answers a bad one with its own ``invalid_value`` naming the parameter, where the handler read
it before (after the key or the account is known). What the document states of each (type,
range, values) is built from that owner's constants, and tests/unit/http/test_query_parameters.py
holds each route to it: the documented bounds and values taken, one past them refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from litestar.openapi.spec import OpenAPIFormat, OpenAPIType
from litestar.params import QueryParameter

from app.accounts.external import MAX_EXTERNAL_ID
from app.accounts.ledger_pages import KINDS as LEDGER_KINDS
from app.accounts.lookup import DEFAULT_LIMIT, MAX_LIMIT, MAX_QUERY_CHARS
from app.books import overview, report
from app.keys.format import ENVIRONMENTS
from app.purchases.listing import STATUSES
from app.usage import activity, reader
from app.usage.export import FORMATS

Query = dict[str, str]
"""The query parameters given, by name, as the rules' owners read them."""

INTEGER, DATE = OpenAPIType.INTEGER, OpenAPIFormat.DATE


def query(description: str, name: str | None = None, **schema: Any) -> Any:
    """A query parameter, declared as the handler gets it (``str | None``) and documented
    as its rule accepts it: ``schema`` (a string unless it says otherwise)."""
    # Litestar would document ``str | None`` as string-or-null: an absent parameter is not
    # sent at all, so the schema is the value's alone
    documented = {"one_of": None, "type": OpenAPIType.STRING, **schema}
    return QueryParameter(
        name=name, description=description, required=False, schema_extra=documented
    )


def whole(description: str, maximum: int, **schema: Any) -> Any:
    """A whole number from 1 to ``maximum``."""
    return query(description, type=INTEGER, minimum=1, maximum=maximum, **schema)


def one_of(description: str, values: Iterable[str], **schema: Any) -> Any:
    return query(description, enum=list(values), **schema)


def given(**values: str | None) -> Query:
    return {name: value for name, value in values.items() if value is not None}


Text = str | None
EntryLimit = Annotated[
    Text,
    whole(f"Entries in the page (default {DEFAULT_LIMIT}).", MAX_LIMIT),
]
EntryAfter = Annotated[
    Text, query("The `id` of the last entry of the previous page (its `last_id`).")
]
Days = Annotated[
    Text,
    whole(
        f"Days in the `daily` window, newest first (default {reader.DEFAULT_DAYS}).",
        reader.MAX_DAYS,
        default=reader.DEFAULT_DAYS,
    ),
]
GroupBy = Annotated[
    Text,
    one_of(
        "Break each day down: every `daily` item gains `groups`, its usage by that value "
        "(`key`: `key_id`, each API key that was used; `model`: `model`, each model "
        "served; `api`: `chat` for chat completions, `responses` for the Responses API, "
        "`messages` for Anthropic's Messages API); the groups sum to the day.",
        reader.GROUP_BY,
    ),
]
UsageFormat = Annotated[
    Text,
    one_of(
        "`csv`: the days as `text/csv` rows (`day`, the `group_by` column when given, "
        "`requests_count`, `total_tokens`, `credits_spent`), newest first.",
        FORMATS,
        name="format",
        default="json",
    ),
]
Environment = Annotated[
    Text,
    one_of(
        "The requests of the account's live keys (default) or of its test keys.",
        ENVIRONMENTS,
        default="live",
    ),
]


Kinds = Annotated[
    Text,
    query(f"Only the entries of these kinds, comma-separated: {', '.join(LEDGER_KINDS)}."),
]
AuditAccount = Annotated[
    Text, query("Only the entries of this account (`acct_…`).", max_length=MAX_QUERY_CHARS)
]
PurchaseStatus = Annotated[
    Text,
    one_of(
        "Only the purchases of this status: granted, or unmatched (paid, and not granted: "
        "the account or the credits were unknown).",
        STATUSES,
    ),
]


async def ledger_query(
    limit: EntryLimit = None, after: EntryAfter = None, kind: Kinds = None
) -> Query:
    return given(limit=limit, after=after, kind=kind)


async def audit_query(
    account: AuditAccount = None, limit: EntryLimit = None, after: EntryAfter = None
) -> Query:
    return given(account=account, limit=limit, after=after)


async def purchases_query(
    status: PurchaseStatus = None, limit: EntryLimit = None, after: EntryAfter = None
) -> Query:
    return given(status=status, limit=limit, after=after)


async def accounts_query(
    query_: Annotated[
        Text,
        query(
            "Only the accounts it names: an account id (`acct_…`), the id of one of its keys "
            "(`key_…`, or the bare id), or a key's last four characters (`last4`).",
            "query",
            max_length=MAX_QUERY_CHARS,
        ),
    ] = None,
    external_id: Annotated[
        Text,
        query(
            "Only the account the app knows by this `external_id` (none: an empty list).",
            min_length=1,
            max_length=MAX_EXTERNAL_ID,
        ),
    ] = None,
    limit: Annotated[
        Text,
        whole(f"Accounts in the page (default {DEFAULT_LIMIT}).", MAX_LIMIT),
    ] = None,
    after: Annotated[
        Text, query("The `id` of the last account of the previous page (its `last_id`).")
    ] = None,
    sort: Annotated[
        Text,
        one_of(
            "The overview instead of a page: every account's balance, debt and live spend "
            "over `days`, the first `limit` by spend, balance or creation (largest, newest "
            "first), with the totals of the credits outstanding and of the debt.",
            overview.SORTS,
        ),
    ] = None,
    days: Annotated[
        Text,
        whole(
            "With `sort`: the UTC days the spend counts, today's included (default "
            f"{overview.DEFAULT_DAYS}).",
            overview.MAX_DAYS,
        ),
    ] = None,
) -> Query:
    return given(
        query=query_, external_id=external_id, limit=limit, after=after, sort=sort, days=days
    )


async def activity_query(
    limit: Annotated[
        Text,
        whole(
            f"Rows in the page (default {activity.DEFAULT_LIMIT}); with `format=csv`, rows "
            "in the export (default: all of them).",
            activity.MAX_LIMIT,
        ),
    ] = None,
    after: Annotated[
        Text, query("The `id` of the last row of the previous page (its `last_id`).")
    ] = None,
    key_id: Annotated[Text, query("Only the requests made with this key (`key_…`).")] = None,
    model: Annotated[Text, query("Only the requests this model served.")] = None,
    day: Annotated[
        Text, query("Only the requests that started on this UTC day.", format=DATE)
    ] = None,
    format_: Annotated[
        Text,
        one_of(
            "`csv`: the rows as `text/csv` (a header row, then one row per request, newest "
            "first, `created` as an ISO 8601 UTC time).",
            FORMATS,
            name="format",
            default="json",
        ),
    ] = None,
) -> Query:
    return given(limit=limit, after=after, key_id=key_id, model=model, day=day, format=format_)


async def books_query(
    first: Annotated[
        Text,
        query(
            f"The first UTC day (default: the {report.DEFAULT_DAYS} days that end on `to`); at "
            f"most {report.MAX_DAYS} days at once.",
            "from",
            format=DATE,
        ),
    ] = None,
    last: Annotated[
        Text, query("The last UTC day, included (default: today).", "to", format=DATE)
    ] = None,
    format_: Annotated[
        Text,
        one_of(
            "`csv`: a CSV file, one row per figure (`day` is `total` for the range).",
            FORMATS,
            name="format",
        ),
    ] = None,
) -> Query:
    return given(**{"from": first, "to": last, "format": format_})
