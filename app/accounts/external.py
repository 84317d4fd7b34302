"""An account's external id: the companion app's own id of its user (a UUID, an email, a
number), set when the account is created or later, unique among accounts, so the app can
name the account by it (``GET /admin/v1/accounts?external_id=``, purchases).

What one may be is decided here, once: 1 to ``MAX_EXTERNAL_ID`` visible ASCII characters
(no space, no control character: it is shown in lists, logs and CSV as it is), not
starting with ``acct_``, so an account reference (``account_reference``) is never both an
account id and an external id.
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec

from app.core.errors import invalid_value

MAX_EXTERNAL_ID = 128
ACCOUNT_ID_PREFIX = "acct_"  # app.accounts.accounts makes every pid with it
_VISIBLE_ASCII = re.compile(r"[!-~]+")
_RULE = (
    f"'external_id' must be 1 to {MAX_EXTERNAL_ID} visible ASCII characters (no space), "
    f"not starting with '{ACCOUNT_ID_PREFIX}'"
)

ExternalId = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=MAX_EXTERNAL_ID,
        description="The app's own id of the account's user (a UUID, an email, a number): "
        f"1 to {MAX_EXTERNAL_ID} visible ASCII characters, no space, not starting with "
        f"{ACCOUNT_ID_PREFIX}; unique among accounts (409 external_id_taken).",
    ),
]


def is_external_id(value: str) -> bool:
    return (
        0 < len(value) <= MAX_EXTERNAL_ID
        and _VISIBLE_ASCII.fullmatch(value) is not None
        and not value.startswith(ACCOUNT_ID_PREFIX)
    )


def check_external_id(value: str) -> str:
    """``value``, or the 400 naming ``external_id``."""
    if not is_external_id(value):
        raise invalid_value("external_id", _RULE + ".")
    return value


def is_account_id(reference: str) -> bool:
    """Whether an account reference names the account by its id (else: by external id)."""
    return reference.startswith(ACCOUNT_ID_PREFIX)
