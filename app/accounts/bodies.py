"""The request bodies of the account and key operations, their limits, and the checks
decoding cannot make. The limits are declared once, as annotations: decoding enforces them
and the OpenAPI document states them (both read these annotations).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

from app.accounts.external import ExternalId, check_external_id
from app.core.clock import DAY_S, parse_iso_utc
from app.core.errors import invalid_value
from app.core.settings import MAX_RATE_LIMIT_RPM
from app.core.validation import decode_json
from app.credits.ceilings import MAX_CEILING
from app.keys.roles import Role

MAX_KEY_NAME = 100
MAX_ROTATION_GRACE_S = 7 * DAY_S
MAX_GRANT = 10**12
KeyName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_KEY_NAME)]
Credits = Annotated[int, msgspec.Meta(ge=1, le=MAX_GRANT)]
DailyCap = Annotated[int, msgspec.Meta(ge=0, le=MAX_GRANT)]
CreditCeiling = Annotated[
    int,
    msgspec.Meta(
        ge=1,
        le=MAX_CEILING,
        description="The most credits one request of the key may hold and be charged: a "
        "request's output cap is lowered to fit, and one whose prompt alone may cost more is "
        "refused (402 credit_ceiling_too_low). null: no ceiling.",
    ),
]
RateLimit = Annotated[
    int,
    msgspec.Meta(
        ge=1,
        le=MAX_RATE_LIMIT_RPM,
        description="Requests the key may start in any 60 seconds; null: no limit.",
    ),
]
ModelIds = Annotated[
    list[Annotated[str, msgspec.Meta(min_length=1, max_length=64)]],
    msgspec.Meta(
        max_length=64,
        description="The models (aliases) the key may use; null: all. svc-auto is allowed "
        "when every alias it may route to is.",
    ),
]
GraceSeconds = Annotated[int, msgspec.Meta(ge=0, le=MAX_ROTATION_GRACE_S)]
KeyRole = Annotated[
    Role,
    msgspec.Meta(
        description="admin: manages keys and webhooks, and everything else; inference: "
        "requests and reads only. Left out: inference, whoever creates the key."
    ),
]
Timestamp = Annotated[
    str,
    msgspec.Meta(
        max_length=40,
        description="An ISO 8601 time with its offset, such as 2027-01-31T00:00:00Z.",
    ),
]


class KeyCreateRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of a key creation (``POST /v1/api-keys`` and the admin API). Left out,
    ``rate_limit_rpm`` is the service's default for new keys (``SVC_KEY_RATE_LIMIT``)."""

    name: KeyName
    environment: Literal["live", "test"]
    daily_cap_credits: DailyCap | None
    expires_at: Timestamp | None = None
    allowed_models: ModelIds | None = None
    rate_limit_rpm: RateLimit | UnsetType | None = UNSET
    max_credits_per_request: CreditCeiling | None = None
    role: KeyRole | UnsetType = UNSET


class KeyUpdateRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of a key update (``PATCH /v1/api-keys/{id}`` and the admin API): the fields to
    change, each left out to keep it (``daily_cap_credits: null`` removes the cap). A key's
    environment never changes; any other field is refused by name."""

    name: KeyName | UnsetType = UNSET
    daily_cap_credits: DailyCap | UnsetType | None = UNSET
    expires_at: Timestamp | UnsetType | None = UNSET
    allowed_models: ModelIds | UnsetType | None = UNSET
    rate_limit_rpm: RateLimit | UnsetType | None = UNSET
    max_credits_per_request: CreditCeiling | UnsetType | None = UNSET
    role: KeyRole | UnsetType = UNSET


class KeyRotateRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of a rotation (``POST /v1/api-keys/{id}/rotate``, optional): how long the old
    key keeps working, in seconds (0: it stops at once), and the new key's role (left out:
    the old key's)."""

    grace_seconds: GraceSeconds = 0
    role: KeyRole | UnsetType = UNSET


MAX_GRANT_REASON = 500
GrantReason = Annotated[
    str,
    msgspec.Meta(
        max_length=MAX_GRANT_REASON,
        description="Why the credits are granted (an order number, a goodwill credit): "
        "kept with the grant and shown in the admin audit log.",
    ),
]


class GrantRequest(msgspec.Struct):
    credits: Credits
    reason: GrantReason | None = None


class DebitRequest(msgspec.Struct):
    """Body of ``POST /admin/v1/accounts/{pid}/debits``: credits taken back as a refund
    takes them (the pools first, the rest owed as debt)."""

    credits: Credits
    reason: GrantReason | None = None


AccountStatus = Annotated[
    Literal["active", "disabled"],
    msgspec.Meta(
        description="disabled: every key of the account is refused (403 account_disabled) "
        "from the next request on; active: they are served again."
    ),
]


class AccountCreateRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``POST /admin/v1/accounts`` (optional: an account without an external id)."""

    external_id: ExternalId | None = None


class AccountUpdateRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``PATCH /admin/v1/accounts/{pid}``: the fields to change, each left out to
    keep it (``external_id: null`` clears it)."""

    status: AccountStatus | UnsetType = UNSET
    external_id: ExternalId | UnsetType | None = UNSET


def account_create_request(body: bytes) -> AccountCreateRequest:
    """An account creation's body, which may be left out (or empty), checked."""
    req = decode_json(body, AccountCreateRequest) if body.strip() else AccountCreateRequest()
    return validate_account_create(req)


def validate_account_create(req: AccountCreateRequest) -> AccountCreateRequest:
    """What decoding cannot check: the external id's characters (``app.accounts.external``)."""
    if req.external_id is not None:
        check_external_id(req.external_id)
    return req


def account_update_request(body: bytes) -> AccountUpdateRequest:
    """An account update's body, checked."""
    req = decode_json(body, AccountUpdateRequest)
    if isinstance(req.external_id, str):
        check_external_id(req.external_id)
    return req


def rotate_request(body: bytes) -> KeyRotateRequest:
    """A rotation's body, which may be left out (or empty) for the defaults."""
    return decode_json(body, KeyRotateRequest) if body.strip() else KeyRotateRequest()


def validate_key_request(req: KeyCreateRequest) -> KeyCreateRequest:
    """What decoding cannot check: a key's name is printable text (``str.isprintable``),
    its expiry a time with its offset (the models a key may use are checked by
    ``ApiKeys``, which knows them)."""
    _check_name(req.name)
    if req.expires_at is not None:
        expiry_seconds(req.expires_at)
    return req


def validate_key_update(req: KeyUpdateRequest) -> KeyUpdateRequest:
    """As ``validate_key_request``, for the fields an update sets."""
    if isinstance(req.name, str):
        _check_name(req.name)
    if isinstance(req.expires_at, str):
        expiry_seconds(req.expires_at)
    return req


def expiry_seconds(text: str) -> int:
    """An ``expires_at`` as unix seconds, or the 400 naming it."""
    seconds = parse_iso_utc(text)
    if seconds is None or seconds <= 0:
        raise invalid_value(
            "expires_at",
            "'expires_at' must be an ISO 8601 time with its offset, "
            "such as 2027-01-31T00:00:00Z, or null.",
        )
    return seconds


def _check_name(name: str) -> None:
    if not name.isprintable():
        raise invalid_value("name", f"'name' must be 1 to {MAX_KEY_NAME} printable characters.")
