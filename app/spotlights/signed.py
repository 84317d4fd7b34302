"""Signed spotlight callbacks: the proof of a view from any verifier svc does not speak to
itself (the companion app's own backend, or a relay for a network svc does not verify).

The verifier signs ``POST /v1/spotlights/verified`` with a secret it shares with svc
(``SVC_SPOTLIGHT_SECRETS``, two at once while one is rotated):
``svc-signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + raw body)>``. The
time must be within 5 minutes of svc's. The secret can do nothing but reward a view for an
intent its account asked for.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated

import msgspec

from app.accounts.rewards import validate_view_id
from app.core.errors import ApiError, ErrorKind
from app.core.validation import decode_json
from app.spotlights.callbacks import refusals_counted
from app.spotlights.rewards import CallbackAnswer, VerifiedRewards

NETWORK = "signed"
SIGNATURE_HEADER = "svc-signature"
TOLERANCE_S = 300
MAX_VIEW_ID = 200
_MAX_HEADER_CHARS = 1024


class VerifiedView(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``POST /v1/spotlights/verified``: the intent the view was shown for, and the
    verifier's own id of the view (its transaction id: a view is rewarded once)."""

    intent: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    view_id: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_VIEW_ID)]


def parse_secrets(text: str) -> tuple[bytes, ...]:
    """A setting of comma-separated secrets, two while one is rotated
    (``SVC_SPOTLIGHT_SECRETS``, ``SVC_APPLOVIN_EVENT_KEYS``, ``SVC_LEVELPLAY_PRIVATE_KEYS``);
    empty: that network's callbacks are off."""
    return tuple(part.strip().encode() for part in text.split(",") if part.strip())


def invalid_signature() -> ApiError:
    return ApiError(
        ErrorKind.INVALID_SIGNATURE,
        f"The {SIGNATURE_HEADER} header does not sign this body with a current secret "
        f"within {TOLERANCE_S // 60} minutes.",
    )


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """The header a verifier sends (what ``check`` accepts)."""
    digest = hmac.new(secret, b"%d." % timestamp + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def check(header: str | None, body: bytes, secrets: tuple[bytes, ...], now: float) -> None:
    """Accept ``body`` only when ``header`` signs it, recently, with one of ``secrets``; the
    401 otherwise. Every secret's digest is compared in constant time."""
    if header is None or len(header) > _MAX_HEADER_CHARS:
        raise invalid_signature()
    timestamp: int | None = None
    given: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit() and len(value) <= 12:
            timestamp = int(value)
        elif name == "v1":
            given.append(value)
    if timestamp is None or not given or abs(now - timestamp) > TOLERANCE_S:
        raise invalid_signature()
    message = b"%d." % timestamp + body
    candidates = [digest.encode("latin-1", errors="replace") for digest in given]
    matched = False
    for secret in secrets:
        expected = hmac.new(secret, message, hashlib.sha256).hexdigest().encode()
        for digest in candidates:
            matched |= hmac.compare_digest(expected, digest)
    if not matched:
        raise invalid_signature()


async def reward_callback(
    header: str | None,
    body: bytes,
    secrets: tuple[bytes, ...],
    rewards: VerifiedRewards,
    now: float,
) -> CallbackAnswer:
    """``POST /v1/spotlights/verified``: the body signed by ``header`` with one of
    ``secrets`` (404 while there is none), then its intent rewarded once per view id."""
    if not secrets:
        raise ApiError(
            ErrorKind.NOT_FOUND,
            "Signed spotlight callbacks are off: the operator sets SVC_SPOTLIGHT_SECRETS.",
        )
    with refusals_counted(NETWORK):
        check(header, body, secrets, now)
    view = decode_json(body, VerifiedView)
    validate_view_id(view.view_id)
    return await rewards.reward(NETWORK, view.view_id, view.intent)
