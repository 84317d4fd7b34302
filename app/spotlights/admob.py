"""AdMob's server-side verification (SSV) callbacks: reading one, checking its signature
against a verifier key, the ad units whose callbacks reward and the callback's time, and
the whole sequence a callback goes through before its reward (``reward_callback``).

Google signs the callback's query string up to ``&signature=``, as sent: the message is
those bytes, never a re-encoding of the parsed parameters. ``signature`` (URL-safe base64
of a DER ECDSA P-256/SHA-256 signature) and ``key_id`` are always the last two parameters,
in that order; a query where they are not is refused before any key is looked at.

The verifier keys themselves, fetched from Google and cached, are
``app.spotlights.admob_keys``'s.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import TYPE_CHECKING

import msgspec

from app.core.errors import (
    AdMobRejected,
    ApiError,
    ErrorKind,
    KeysUnavailable,
    invalid_value,
    service_unavailable,
)
from app.core.metrics import METRICS
from app.spotlights.admob_keys import VerifierKeys
from app.spotlights.callbacks import (
    MAX_QUERY_BYTES,
    component,
    refusals_counted,
    signature_refused,
)
from app.spotlights.rewards import CallbackAnswer, VerifiedRewards

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey

NETWORK = "admob"
MAX_FUTURE_MS = 300_000  # a callback's timestamp may run this far ahead of svc's clock

_SIGNATURE_MARK = b"&signature="
_KEY_ID_MARK = b"&key_id="
_REQUIRED = (
    "ad_network",
    "ad_unit",
    "custom_data",
    "reward_amount",
    "reward_item",
    "timestamp",
    "transaction_id",
)
_TRAILING = frozenset({"signature", "key_id"})
_URL_SAFE_BASE64 = re.compile(r"[A-Za-z0-9_-]+")
_MAX_SIGNATURE_CHARS = 256  # a DER P-256 signature is at most 72 bytes (96 characters)
_MAX_KEY_ID_DIGITS = 19  # fits a signed 64-bit integer
_MAX_TIMESTAMP_DIGITS = 16


class AdMobCallback(msgspec.Struct, frozen=True, kw_only=True):
    """One SSV callback: its parameters percent-decoded, the bytes Google signed and the
    signature it sent."""

    ad_network: str
    ad_unit: str
    custom_data: str
    reward_amount: str
    reward_item: str
    timestamp_ms: int
    transaction_id: str
    user_id: str
    """Empty when the app set none (Google then leaves the parameter out)."""
    key_id: int
    message: bytes
    """The query string up to ``&signature=``, byte for byte as received."""
    signature: bytes
    """The DER signature, decoded from its URL-safe base64."""


def _text(raw: bytes) -> str:
    """A query component percent-decoded (``+`` is a space, as in any form-encoded query)."""
    try:
        return component(raw)
    except UnicodeDecodeError:
        raise AdMobRejected("a parameter is not UTF-8") from None


def _number(name: str, text: str, digits: int) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > digits:
        raise AdMobRejected(f"{name} is not a number")
    return int(text)


def _signature(raw: bytes) -> bytes:
    text = _text(raw).rstrip("=")  # padding tolerated, percent-encoded or not
    if len(text) > _MAX_SIGNATURE_CHARS or not _URL_SAFE_BASE64.fullmatch(text):
        raise AdMobRejected("signature is not URL-safe base64")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise AdMobRejected("signature is not URL-safe base64") from None


def _parameters(message: bytes) -> dict[str, str]:
    """The signed part's parameters; each name once, and neither of the trailing two."""
    found: dict[str, str] = {}
    for part in message.split(b"&"):
        if not part:
            continue
        raw_name, _, raw_value = part.partition(b"=")
        name = _text(raw_name)
        if name in _TRAILING:
            raise AdMobRejected("signature and key_id must be the last two parameters")
        if name in found:
            raise AdMobRejected(f"{name[:40]} is given twice")
        found[name] = _text(raw_value)
    return found


def parse_callback(raw_query: bytes) -> AdMobCallback:
    """Read a callback's raw query string (bytes as received, without the ``?``); raises
    ``AdMobRejected`` when it is not one Google could have signed."""
    if len(raw_query) > MAX_QUERY_BYTES:
        raise AdMobRejected("query string too long")
    at = raw_query.find(_SIGNATURE_MARK)
    if at < 0:
        raise AdMobRejected("no signature")
    message, tail = raw_query[:at], raw_query[at + len(_SIGNATURE_MARK) :]
    raw_signature, marked, raw_key_id = tail.partition(_KEY_ID_MARK)
    if not marked or b"&" in raw_signature or b"&" in raw_key_id:
        raise AdMobRejected("signature and key_id must be the last two parameters")
    if not raw_signature:
        raise AdMobRejected("empty signature")
    found = _parameters(message)
    missing = [name for name in _REQUIRED if name not in found]
    if missing:
        raise AdMobRejected(f"{missing[0]} is missing")
    return AdMobCallback(
        ad_network=found["ad_network"],
        ad_unit=found["ad_unit"],
        custom_data=found["custom_data"],
        reward_amount=found["reward_amount"],
        reward_item=found["reward_item"],
        timestamp_ms=_number("timestamp", found["timestamp"], _MAX_TIMESTAMP_DIGITS),
        transaction_id=found["transaction_id"],
        user_id=found.get("user_id", ""),
        key_id=_number("key_id", _text(raw_key_id), _MAX_KEY_ID_DIGITS),
        message=message,
        signature=_signature(raw_signature),
    )


def verify(callback: AdMobCallback, key: EllipticCurvePublicKey) -> bool:
    """Whether ``key`` signed the callback's message (ECDSA P-256, SHA-256, DER); a bad or
    malformed signature is False, never an exception."""
    # imported by a worker's first callback (reading the keys imported them), not by every
    # worker at start: cryptography costs about 7 MB of RSS per worker (bench/CHANGELOG.md,
    # issue 53)
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.ec import ECDSA, SECP256R1

    if not isinstance(key.curve, SECP256R1):
        return False
    try:
        key.verify(callback.signature, callback.message, ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        return False
    return True


def ad_units(setting: str) -> frozenset[str]:
    """The ad unit ids ``SVC_ADMOB_AD_UNITS`` lists (comma-separated), as a callback's
    ``ad_unit`` names them (the digits after the slash of ``ca-app-pub-…/2747237135``): the
    only ones whose callbacks reward. None: AdMob callbacks are off, since Google signs every
    publisher's callbacks with the same keys (anyone's ad unit could carry svc's intents)."""
    ids = (item.strip().rpartition("/")[2] for item in setting.split(","))
    return frozenset(unit for unit in ids if unit)


def timestamp_acceptable(
    callback: AdMobCallback, *, now_ms: int, since_ms: int, until_ms: int
) -> bool:
    """Whether the callback's time is at most ``MAX_FUTURE_MS`` past svc's clock and within
    ``[since_ms, until_ms]`` (the life of the intent it rewards)."""
    t = callback.timestamp_ms
    return t <= now_ms + MAX_FUTURE_MS and since_ms <= t <= until_ms


async def reward_callback(
    raw_query: bytes, ad_unit_setting: str, keys: VerifierKeys, rewards: VerifiedRewards
) -> CallbackAnswer:
    """``GET /v1/spotlights/admob``: a callback's raw query read as Google signs it, its ad
    unit one of ``ad_unit_setting`` (``SVC_ADMOB_AD_UNITS``; 404 while none is listed), its
    signature verified under the key its ``key_id`` names, then its ``custom_data`` intent
    rewarded once per ``transaction_id``."""
    allowed = ad_units(ad_unit_setting)
    if not allowed:
        raise ApiError(
            ErrorKind.NOT_FOUND,
            "AdMob callbacks are off: the operator lists the ad units in SVC_ADMOB_AD_UNITS.",
        )
    with refusals_counted(NETWORK):
        try:
            callback = parse_callback(raw_query)
        except AdMobRejected as exc:
            raise invalid_value("signature", f"Not an AdMob callback: {exc.reason}.") from None
        if callback.ad_unit not in allowed:
            raise invalid_value("ad_unit", "This ad unit does not reward here.")
        try:
            key = await keys.key(callback.key_id)
        except KeysUnavailable:
            METRICS.labelled(METRICS.spotlight_callbacks, NETWORK, "unavailable").inc()
            raise service_unavailable() from None
        if key is None or not verify(callback, key):
            raise signature_refused("AdMob", "signature")
    return await rewards.reward(
        NETWORK, callback.transaction_id, callback.custom_data, shown_at_ms=callback.timestamp_ms
    )
