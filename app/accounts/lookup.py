"""Finding accounts, for operators (``GET /admin/v1/accounts``, ``svc admin accounts``): the
query parameters of a page of them, newest first, and what a ``query`` may name.

A ``query`` names an account by its id (``acct_…``), by the id of one of its keys in either
form (``key_…`` as the API shows it, or the bare id Redis key names carry), or by a key's
last four characters (what a key list shows as ``last4``, and what a user can read off
their key). Each form it can be is tried, so a page lists every account any of them finds.
``after`` is the ``id`` of the last account of the previous page, as in OpenAI's lists.
``external_id`` lists only the account the app knows by that id (none: an empty page).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from app.accounts.external import check_external_id
from app.core.errors import invalid_value
from app.core.validation import query_int
from app.keys.format import is_last4, kid_named

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
MAX_QUERY_CHARS = 64  # longer than any id svc makes


class AccountFilter(msgspec.Struct, frozen=True, kw_only=True):
    """What an operator asked for (the query parameters), checked."""

    limit: int = DEFAULT_LIMIT
    after: str | None = None  # the pid of the account the page follows
    pid: str | None = None  # an account id the query may be
    kid: str | None = None  # a key id it may be (either form, as the bare id)
    last4: str | None = None  # a key's last four characters it may be
    external_id: str | None = None  # only the account with this external id


def _text(params: Mapping[str, str], name: str) -> str | None:
    raw = params.get(name)
    if raw is None or raw.strip() == "":
        return None
    raw = raw.strip()
    if len(raw) > MAX_QUERY_CHARS or not raw.isprintable():
        raise invalid_value(
            name, f"'{name}' must be at most {MAX_QUERY_CHARS} printable characters."
        )
    return raw


def parse_account_filter(params: Mapping[str, str]) -> AccountFilter:
    """The query parameters ``limit`` (1-500, default 100), ``after``, ``query`` and
    ``external_id``."""
    query = _text(params, "query")
    external_id = params.get("external_id")
    return AccountFilter(
        external_id=None if external_id is None else check_external_id(external_id),
        limit=query_int(params.get("limit"), "limit", low=1, high=MAX_LIMIT, default=DEFAULT_LIMIT),
        after=_text(params, "after"),
        pid=query,
        kid=None if query is None else kid_named(query),
        last4=query if query is not None and is_last4(query) else None,
    )
