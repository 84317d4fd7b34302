"""What a key may do, and what it may give another key.

Two roles. ``admin`` manages the account's keys and webhooks and does everything else;
``inference`` makes requests and reads the account (models, credits, usage, activity, its
keys and webhooks) but changes nothing. Every key is ``inference`` unless its creator asks
for ``admin`` (least privilege: a key handed to an app or a customer cannot manage keys by
accident), whoever creates it: a key through ``/v1/api-keys`` or an operator (admin API,
CLI). The dev key alone is made ``admin``, as the one key a new deployment starts with.

A key never grants more than it has: every key it creates, changes or rotates stays within
its own limits (daily cap, allowed models, rate limit, expiry, role), and it acts only on
keys within them (rotating an unlimited key would hand out an unlimited secret). So a key
given to a mobile app cannot lift its own cap, and a limited admin key cannot reach the
owner's own key. Operators (the admin API and CLI) are not bound by any key.

Limits per key are not enough for what is counted per day or per minute: a key capped at
100 credits a day that made five keys capped at 100 each would spend 600. So the keys a
capped or rate-limited key creates join its lineage (``lineage_of_keys_made_by``): they
count in its daily cap counter and its rate log, as its rotations do, and together never
spend more in a day, nor start more requests in a minute, than it may alone.
"""

from __future__ import annotations

from typing import Literal

from app.core.errors import ApiError, ErrorKind
from app.store import KeyRecord

ADMIN = "admin"
INFERENCE = "inference"
Role = Literal["admin", "inference"]
ROLES: tuple[Role, ...] = ("admin", "inference")
DEFAULT_ROLE: Role = "inference"
"""The role of a new key whose creator names none (through ``/v1`` or an operator)."""


def lineage_of_keys_made_by(granter: KeyRecord | None) -> str | None:
    """The lineage of a key ``granter`` creates: ``granter``'s own when it has a daily cap
    or a rate limit, so its keys share them (and their rotations after them: a successor
    keeps its predecessor's lineage); None, a lineage of the new key's own, when an operator
    or a key with neither creates it."""
    if granter is None:
        return None
    if granter.daily_cap_credits is None and granter.rate_limit_rpm is None:
        return None
    return granter.cap_kid


def require_live(environment: str, why: str) -> None:
    """Nothing for a live key's ``environment``; else the 403 ``test_key_forbidden`` saying
    ``why``: the work that belongs to live traffic (webhooks, spotlight rewards, purchases)
    is refused to test keys."""
    if environment != "live":
        raise ApiError(ErrorKind.TEST_KEY_FORBIDDEN, f"{why}: use a live key.")


def require_manager(caller: KeyRecord) -> KeyRecord:
    """``caller`` when it may manage keys and webhooks: a live ``admin`` key; else 403."""
    if caller.environment != "live":
        raise ApiError(
            ErrorKind.TEST_KEY_FORBIDDEN,
            "Test keys cannot manage API keys or webhooks; use a live key.",
        )
    if caller.role != ADMIN:
        raise ApiError(
            ErrorKind.PERMISSION_DENIED,
            "This API key has the 'inference' role: it cannot create, change, rotate or "
            "revoke keys or webhooks. Use a key with the 'admin' role.",
        )
    return caller


def _over(granted: int | None, own: int | None) -> bool:
    """A limit (None: none) that is more than ``own``'s."""
    return own is not None and (granted is None or granted > own)


def beyond(key: KeyRecord, granter: KeyRecord) -> str | None:
    """The first setting of ``key`` that gives more than ``granter`` has (its field name),
    or None when ``key`` stays within ``granter``'s limits."""
    if _over(key.daily_cap_credits, granter.daily_cap_credits):
        return "daily_cap_credits"
    if granter.allowed_models is not None and (
        key.allowed_models is None
        or not set(key.allowed_models.split()) <= set(granter.allowed_models.split())
    ):
        return "allowed_models"
    if _over(key.rate_limit_rpm, granter.rate_limit_rpm):
        return "rate_limit_rpm"
    if _over(key.max_credits_per_request, granter.max_credits_per_request):
        return "max_credits_per_request"
    if _over(key.expires_at, granter.expires_at):
        return "expires_at"
    if key.role == ADMIN and granter.role != ADMIN:
        return "role"
    return None


def check_within(key: KeyRecord, granter: KeyRecord | None, *, acting_on: bool = False) -> None:
    """403 ``permission_denied`` naming the setting when ``key`` (one to be written, or with
    ``acting_on`` one the granter would change, rotate or revoke) exceeds ``granter``'s own
    limits; ``granter`` None: an operator, bound by none."""
    if granter is None:
        return
    field = beyond(key, granter)
    if field is None:
        return
    if acting_on:
        message = (
            f"This API key cannot manage a key with more than it has itself ('{field}' "
            "goes beyond its own)."
        )
    else:
        message = f"An API key cannot grant more than it has: '{field}' goes beyond this key's own."
    raise ApiError(ErrorKind.PERMISSION_DENIED, message, param=field)
