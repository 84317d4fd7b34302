"""The errors the API returns (``ErrorKind``: each one HTTP status, one OpenAI type and
code) and the headers each answers with: their one owner, read by ``ApiError`` (the values
a kind fixes) and by the OpenAPI document (what it says of each)."""

from __future__ import annotations

from enum import Enum
from typing import Final, NamedTuple


class ErrorKind(Enum):
    """(status, type, code) of every error the API returns."""

    INVALID_API_KEY = (401, "authentication_error", "invalid_api_key")
    API_KEY_REVOKED = (401, "authentication_error", "api_key_revoked")
    API_KEY_EXPIRED = (401, "authentication_error", "api_key_expired")
    ADMIN_UNAUTHORIZED = (401, "authentication_error", "invalid_admin_token")
    TEST_KEY_FORBIDDEN = (403, "permission_error", "test_key_forbidden")
    MODEL_NOT_ALLOWED = (403, "permission_error", "model_not_allowed")
    PERMISSION_DENIED = (403, "permission_error", "permission_denied")
    ACCOUNT_DISABLED = (403, "permission_error", "account_disabled")
    INVALID_VALUE = (400, "invalid_request_error", "invalid_value")
    STREAM_REQUIRED = (400, "invalid_request_error", "stream_required")
    KEY_LIMIT = (400, "invalid_request_error", "api_key_limit_reached")
    WEBHOOK_LIMIT = (400, "invalid_request_error", "webhook_limit_reached")
    MODEL_NOT_FOUND = (404, "invalid_request_error", "model_not_found")
    NOT_FOUND = (404, "not_found_error", "not_found")
    ACCOUNT_NOT_FOUND = (404, "not_found_error", "account_not_found")
    API_KEY_NOT_FOUND = (404, "not_found_error", "api_key_not_found")
    WEBHOOK_NOT_FOUND = (404, "not_found_error", "webhook_not_found")
    ACTIVITY_NOT_FOUND = (404, "not_found_error", "activity_not_found")
    REDIS_NOT_EMPTY = (409, "invalid_request_error", "redis_not_empty")
    KEY_NOT_ROTATABLE = (409, "invalid_request_error", "api_key_not_rotatable")
    EXTERNAL_ID_TAKEN = (409, "invalid_request_error", "external_id_taken")
    IDEMPOTENCY_IN_PROGRESS = (409, "invalid_request_error", "idempotency_in_progress")
    IDEMPOTENCY_UNAVAILABLE = (409, "invalid_request_error", "idempotency_response_unavailable")
    IDEMPOTENCY_KEY_REUSED = (422, "invalid_request_error", "idempotency_key_reused")
    METHOD_NOT_ALLOWED = (405, "invalid_request_error", "method_not_allowed")
    REQUEST_TOO_LARGE = (413, "invalid_request_error", "request_too_large")
    INSUFFICIENT_CREDITS = (402, "insufficient_credits", "insufficient_credits")
    ACCOUNT_IN_DEBT = (402, "insufficient_credits", "account_in_debt")
    CREDIT_CEILING_TOO_LOW = (402, "invalid_request_error", "credit_ceiling_too_low")
    DAILY_CAP_EXCEEDED = (429, "rate_limit_error", "daily_cap_exceeded")
    DAILY_CAP_HELD = (429, "rate_limit_error", "daily_cap_held")
    AUTH_RATE_LIMITED = (429, "rate_limit_error", "auth_rate_limited")
    KEY_RATE_LIMITED = (429, "rate_limit_error", "rate_limit_exceeded")
    SPOTLIGHT_LIMIT = (429, "rate_limit_error", "spotlight_limit_reached")
    INVALID_SIGNATURE = (401, "authentication_error", "invalid_signature")
    INVALID_STRIPE_SIGNATURE = (400, "invalid_request_error", "invalid_stripe_signature")
    INVALID_PUSH_TOKEN = (401, "authentication_error", "invalid_push_token")
    INVALID_GOOGLE_PURCHASE = (400, "invalid_request_error", "invalid_google_purchase")
    INVALID_APPLE_SIGNATURE = (400, "invalid_request_error", "invalid_apple_signature")
    ACCOUNT_TOKEN_MISMATCH = (400, "invalid_request_error", "account_token_mismatch")
    INVALID_INTENT = (400, "invalid_request_error", "invalid_intent")
    INTENT_USED = (400, "invalid_request_error", "intent_used")
    UPSTREAM_UNAVAILABLE = (502, "upstream_error", "upstream_unavailable")
    SERVICE_UNAVAILABLE = (503, "server_error", "service_unavailable")
    INTERNAL = (500, "server_error", "internal_error")

    @property
    def status(self) -> int:
        return self.value[0]

    @property
    def code(self) -> str:
        return self.value[2]

    @property
    def headers(self) -> tuple[ErrorHeader, ...]:
        """The headers an error of this kind may answer with (docs/api.md, Errors)."""
        return ERROR_HEADERS.get(self, ())

    @property
    def fixed_headers(self) -> dict[str, str]:
        """The headers every error of this kind answers with, and their values."""
        return {h.name: h.value for h in self.headers if h.value is not None}


class ErrorHeader(NamedTuple):
    """A header an error answers with, as the document describes it; ``value``: the one
    every error of its kind carries (None: the refusal sets it, when it applies)."""

    name: str
    description: str
    value: str | None = None


CAP_HELD_RETRY_AFTER_S = 3
"""The ``retry-after`` of ``daily_cap_held``: the key's cap is taken by holds of requests in
flight, which settle (and give back what they did not use) within seconds as a rule."""
CAP_RESETS_HEADER: Final = "svc-cap-resets-at"
"""On a ``daily_cap_exceeded`` refusal: when the key's cap resets (RFC 3339, the next 00:00
UTC). It stands in for a ``retry-after``, which clients obey: hours of it froze coding
agents (Codex, opencode, DSPy) or slept them for minutes."""

_NEVER_RETRY = ErrorHeader("x-should-retry", "Always `false`.", "false")
_RETRY_SOON = ErrorHeader("retry-after", "Seconds to wait before retrying.", "1")
ERROR_HEADERS: dict[ErrorKind, tuple[ErrorHeader, ...]] = {
    ErrorKind.INSUFFICIENT_CREDITS: (_NEVER_RETRY,),
    ErrorKind.ACCOUNT_IN_DEBT: (_NEVER_RETRY,),
    ErrorKind.CREDIT_CEILING_TOO_LOW: (_NEVER_RETRY,),
    ErrorKind.DAILY_CAP_EXCEEDED: (
        _NEVER_RETRY,
        ErrorHeader(
            CAP_RESETS_HEADER,
            "When the key's cap resets (RFC 3339, the next 00:00 UTC); no `retry-after`, "
            "which clients would sleep for hours.",
        ),
    ),
    ErrorKind.DAILY_CAP_HELD: (
        ErrorHeader("x-should-retry", "Always `true`.", "true"),
        ErrorHeader(
            "retry-after",
            "Seconds to wait before retrying (a few: the holds settle).",
            str(CAP_HELD_RETRY_AFTER_S),
        ),
    ),
    ErrorKind.SPOTLIGHT_LIMIT: (_NEVER_RETRY,),
    # the SDKs retry a 409: the running request is worth waiting for, the other is final
    ErrorKind.IDEMPOTENCY_IN_PROGRESS: (_RETRY_SOON,),
    ErrorKind.IDEMPOTENCY_UNAVAILABLE: (_NEVER_RETRY,),
    ErrorKind.EXTERNAL_ID_TAKEN: (_NEVER_RETRY,),
    ErrorKind.UPSTREAM_UNAVAILABLE: (
        ErrorHeader("x-should-retry", "Always `true`: retry the request.", "true"),
    ),
    ErrorKind.SERVICE_UNAVAILABLE: (_RETRY_SOON,),
    ErrorKind.AUTH_RATE_LIMITED: (
        _RETRY_SOON,
        ErrorHeader(
            "x-should-retry",
            "`false` when the client address failed authentication too often.",
        ),
    ),
    ErrorKind.KEY_RATE_LIMITED: (
        ErrorHeader(
            "retry-after",
            "Seconds (rounded up) until the oldest of the key's starts in the last minute "
            "is a minute old.",
        ),
        ErrorHeader("retry-after-ms", "The same, in milliseconds."),
    ),
}
