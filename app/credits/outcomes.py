"""What the scripts answer: one status enum for every script, the typed result of each
call, and the API error each refusal means (one place maps a status to an error)."""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import IntEnum
from typing import NamedTuple

import msgspec

from app.core.clock import seconds_to_utc_midnight
from app.core.errors import (
    ApiError,
    ErrorKind,
    KeyRecordMissing,
    invalid_api_key,
    model_not_allowed,
    service_unavailable,
)
from app.credits import idempotency


class ScriptStatus(IntEnum):
    """The first item of every script's reply (the numbers are the scripts' own)."""

    OK = 0
    KEY_UNKNOWN = 1
    KEY_REVOKED = 2
    ACCOUNT_MISSING = 3
    INSUFFICIENT_CREDITS = 4
    DAILY_CAP_EXCEEDED = 5
    DUPLICATE = 6
    NOT_FOUND = 7
    NOT_EXPIRED = 8
    DAILY_LIMIT = 9
    RATE_LIMITED = 10
    GAVE_UP = 11
    KEY_EXPIRED = 12
    MODEL_NOT_ALLOWED = 13
    IDEMPOTENCY_REUSED = 14
    IDEMPOTENCY_RUNNING = 15
    REPLAY = 16
    UNRECORDED = 17


class Identity(msgspec.Struct, frozen=True):
    """Who a key secret is: immutable for the key's whole life, so workers cache it."""

    pid: str
    kid: str
    environment: str
    shard: int
    lineage: str = ""  # kid of the first key of its rotations; "": it is the first

    @property
    def cap_kid(self) -> str:
        """The kid its daily cap counter and rate limit are kept under (its lineage's)."""
        return self.lineage or self.kid

    def encode(self) -> str:
        """As the digest mapping holds it: ``pid kid environment [lineage]``."""
        base = f"{self.pid} {self.kid} {self.environment}"
        return f"{base} {self.lineage}" if self.lineage else base

    @classmethod
    def decode(cls, text: str, shard_of: Callable[[str], int]) -> Identity:
        pid, kid, environment, *lineage = text.split(" ")
        return cls(pid, kid, environment, shard_of(pid), lineage[0] if lineage else "")


class Hold(msgspec.Struct, kw_only=True):
    """An open reservation, as the request that made it knows it."""

    rid: str
    shard: int
    pid: str
    kid: str
    day: str  # YYYY-MM-DD, UTC day the reservation (and its usage) belongs to
    amount: int
    out_tokens: int
    balance: int
    environment: str  # the key's: live or test
    cap_key: str  # the cap counter the credits are held in (the key lineage's, that day)
    idempotency: str | None = None  # the record of its Idempotency-Key (a Redis key), if any


class Settlement(msgspec.Struct, frozen=True):
    status: ScriptStatus
    credits_used: int
    balance: int


class Balance(msgspec.Struct, frozen=True):
    earned: int
    earned_exp: int  # unix seconds; 0 while the earned pool is empty
    purchased: int

    @property
    def total(self) -> int:
        return self.earned + self.purchased


def key_refusal(status: ScriptStatus) -> ApiError | None:
    """The API error for a key or account status, or None when the status is OK."""
    if status is ScriptStatus.KEY_REVOKED:
        return ApiError(ErrorKind.API_KEY_REVOKED, "This API key has been revoked.")
    if status is ScriptStatus.KEY_EXPIRED:
        return ApiError(ErrorKind.API_KEY_EXPIRED, "This API key has expired.")
    if status is ScriptStatus.KEY_UNKNOWN:
        missing = invalid_api_key()
        return KeyRecordMissing(missing.kind, missing.message)
    if status is ScriptStatus.ACCOUNT_MISSING:
        return invalid_api_key()
    return None


def idempotency_refusal(status: ScriptStatus) -> ApiError | None:
    """The API error for what an Idempotency-Key's record says (None: it says go on)."""
    if status is ScriptStatus.IDEMPOTENCY_RUNNING:
        return idempotency.in_progress()
    if status is ScriptStatus.IDEMPOTENCY_REUSED:
        return idempotency.key_reused()
    if status is ScriptStatus.UNRECORDED:
        return idempotency.unrecorded()
    return None


def reserve_refusal(
    status: ScriptStatus, value: int, now: float, *, requested: str, alias: str
) -> ApiError:
    """The API error for a reservation the script refused (of a request for the model
    ``requested``, served by ``alias``)."""
    refusal = key_refusal(status)
    if refusal is not None:
        return refusal
    if status is ScriptStatus.INSUFFICIENT_CREDITS:
        return ApiError(
            ErrorKind.INSUFFICIENT_CREDITS,
            f"Not enough credits for this request ({value} available). "
            "Lower max_tokens or add credits.",
        )
    if status is ScriptStatus.DAILY_CAP_EXCEEDED:
        return ApiError(
            ErrorKind.DAILY_CAP_EXCEEDED,
            f"This API key's daily credit cap is reached ({value} credits left today).",
            headers={"retry-after": str(seconds_to_utc_midnight(now))},
        )
    if status is ScriptStatus.GAVE_UP:
        # Redis ran the reserve after this worker stopped waiting: what the caller saw (or
        # sees now) is the same 503, and nothing was held.
        return service_unavailable()
    if status is ScriptStatus.MODEL_NOT_ALLOWED:
        return model_not_allowed(requested, routed=requested != alias)
    refusal = idempotency_refusal(status)
    if refusal is not None:
        return refusal
    if status is ScriptStatus.RATE_LIMITED:
        return ApiError(
            ErrorKind.KEY_RATE_LIMITED,
            "This API key started as many requests as its rate limit allows in the last "
            "minute. Retry after the time in retry-after.",
            headers={
                "retry-after": str(max(1, math.ceil(value / 1000))),
                "retry-after-ms": str(value),
            },
        )
    return ApiError(ErrorKind.INTERNAL, "The request could not be processed.")


class Written(NamedTuple):
    """A write that happens once: OK when this call made it, DUPLICATE when it was there
    already (``open_account``, ``put_key``, ``revoke_key``: revoked before), KEY_UNKNOWN when
    the key's record names another account (``revoke_key``, ``update_key``), NOT_FOUND when
    the reservation is gone (``extend``)."""

    status: ScriptStatus


class KeyAccess(NamedTuple):
    """What a key may do now, as Redis says (read outside the scripts)."""

    status: ScriptStatus  # OK, KEY_UNKNOWN, KEY_REVOKED or KEY_EXPIRED
    models: frozenset[str] | None  # the aliases it may use; None: all


class BalanceRead(NamedTuple):
    status: ScriptStatus  # OK, KEY_UNKNOWN, KEY_REVOKED or ACCOUNT_MISSING
    balance: Balance


class Granted(NamedTuple):
    status: ScriptStatus  # OK, ACCOUNT_MISSING, DUPLICATE or DAILY_LIMIT
    balance: Balance  # the pools after the call
    granted_at: int  # now, or when a DUPLICATE grant was first applied
