"""The API error each refusal of a script means: the one mapping from a ``ScriptStatus`` to
an ``ApiError`` (its kind, message and headers), for the key checks (authentication, the
balance route), a reserve's refusal (the streams) and an Idempotency-Key's record (the JSON
routes). It sits here, the lowest floor that raises API errors for a request (the
authenticator), so that every route above it uses the same one."""

from __future__ import annotations

import math

from app.core.clock import iso_utc, seconds_to_utc_midnight
from app.core.error_kinds import CAP_RESETS_HEADER as CAP_RESETS_HEADER
from app.core.errors import (
    ApiError,
    ErrorKind,
    KeyRecordMissing,
    invalid_api_key,
    model_not_allowed,
    service_unavailable,
)
from app.credits.ceilings import HEADER
from app.credits.outcomes import Refusal, ScriptStatus


def refusal_error(refusal: Refusal) -> ApiError:
    """The API error for a script's refusal (of a request for the model ``requested``,
    served by ``alias``, for a reserve's)."""
    status, value = refusal.status, refusal.value
    named = _key_error(status) or _idempotency_error(status)
    if named is not None:
        return named
    if status is ScriptStatus.INSUFFICIENT_CREDITS:
        return ApiError(
            ErrorKind.INSUFFICIENT_CREDITS,
            f"Not enough credits for this request ({value} available). "
            "Lower max_tokens or add credits.",
        )
    if status is ScriptStatus.ACCOUNT_IN_DEBT:
        return ApiError(
            ErrorKind.ACCOUNT_IN_DEBT,
            f"This account owes {value} credits: a refund or a chargeback took back credits "
            "that were already spent. A purchase of credits pays the debt first and clears "
            "it; the account's requests are refused until then.",
        )
    if status is ScriptStatus.CEILING_TOO_LOW:
        return ceiling_error(refusal.ceiling, value)
    if status is ScriptStatus.DAILY_CAP_EXCEEDED:
        resets = iso_utc(int(refusal.now) + seconds_to_utc_midnight(refusal.now))
        return ApiError(
            ErrorKind.DAILY_CAP_EXCEEDED,
            f"This API key's daily credit cap is reached ({value} credits left today). It "
            f"resets at {resets} (00:00 UTC); raise the key's daily_cap_credits to allow "
            "more today.",
            headers={CAP_RESETS_HEADER: resets},
        )
    if status is ScriptStatus.DAILY_CAP_HELD:
        return ApiError(
            ErrorKind.DAILY_CAP_HELD,
            f"This API key's daily credit cap is taken by its requests still running ({value} "
            "credits left today). Retry after the time in retry-after: what they do not use "
            "comes back when they finish.",
        )
    if status is ScriptStatus.GAVE_UP:
        # Redis ran the reserve after this worker stopped waiting: what the caller saw (or
        # sees now) is the same 503, and nothing was held.
        return service_unavailable()
    if status is ScriptStatus.MODEL_NOT_ALLOWED:
        return model_not_allowed(refusal.requested, routed=refusal.requested != refusal.alias)
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


def ceiling_error(ceiling: int, prompt_credits: int) -> ApiError:
    """A request whose credit ceiling cannot hold its prompt and one output token."""
    if prompt_credits > ceiling:
        need = f"its prompt alone may cost up to {prompt_credits}"
    else:
        need = f"its prompt may cost up to {prompt_credits}, leaving no room for output"
    return ApiError(
        ErrorKind.CREDIT_CEILING_TOO_LOW,
        f"This request's credit ceiling is {ceiling} credits ({HEADER} or the API key's "
        f"max_credits_per_request, the lower), and {need}. Raise the ceiling or shorten "
        "the prompt.",
    )


def key_refusal(status: ScriptStatus) -> ApiError | None:
    """The API error for what a key check answered (``refusal_error``'s), or None when it
    may be used."""
    if status is ScriptStatus.OK:
        return None
    return refusal_error(Refusal(status, 0, 0.0))


def _key_error(status: ScriptStatus) -> ApiError | None:
    if status is ScriptStatus.KEY_REVOKED:
        return ApiError(ErrorKind.API_KEY_REVOKED, "This API key has been revoked.")
    if status is ScriptStatus.KEY_EXPIRED:
        return ApiError(ErrorKind.API_KEY_EXPIRED, "This API key has expired.")
    if status is ScriptStatus.KEY_UNKNOWN:
        missing = invalid_api_key()
        return KeyRecordMissing(missing.kind, missing.message)
    if status is ScriptStatus.ACCOUNT_MISSING:
        return invalid_api_key()
    if status is ScriptStatus.ACCOUNT_DISABLED:
        return ApiError(
            ErrorKind.ACCOUNT_DISABLED,
            "This API key's account is disabled. Contact the service's operator.",
        )
    return None


def _idempotency_error(status: ScriptStatus) -> ApiError | None:
    if status is ScriptStatus.IDEMPOTENCY_RUNNING:
        return ApiError(
            ErrorKind.IDEMPOTENCY_IN_PROGRESS,
            "A request with this Idempotency-Key is still running. Retry after it finishes.",
        )
    if status is ScriptStatus.IDEMPOTENCY_REUSED:
        return ApiError(
            ErrorKind.IDEMPOTENCY_KEY_REUSED,
            "This Idempotency-Key was used for another request (another route or body). "
            "Use a new key for a new request.",
        )
    if status is ScriptStatus.UNRECORDED:
        return ApiError(
            ErrorKind.IDEMPOTENCY_UNAVAILABLE,
            "The request with this Idempotency-Key finished, but its response was not kept "
            "(larger than the service keeps, or cut short), so it cannot be replayed; it was "
            "not run or charged again. Use a new key to send it again.",
        )
    return None
