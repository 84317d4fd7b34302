"""Spotlight intents: what a companion app asks for before it shows a rewarded spotlight, and
hands the ad network (AdMob's ``custom_data``) or its own backend to send back with the
proof of the view.

An intent is a token: ``spi_`` and the URL-safe base64 of a nonce and the AES-256-GCM
sealing of its account, id and expiry, under a key derived from the pepper. So it names
nothing in clear, and nobody without the pepper can make one or change one. It lives an
hour and rewards once: its reward consumes it in the same script call that grants the
credits (``grant.lua``'s intent marker).
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from app.core.errors import ApiError, ErrorKind
from app.core.pepper import derive_key

INTENT_TTL_S = 3600
TOKEN_PREFIX = "spi_"
MAX_TOKEN_CHARS = 512
_AAD = b"svc spotlight intent v1"

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM


class Intent(NamedTuple):
    """An intent as its token carries it."""

    pid: str
    intent_id: str
    expires_at: int  # unix seconds

    def life_left(self, now: float) -> int:
        return max(0, self.expires_at - int(now))


class IntentIssued(msgspec.Struct):
    """The answer of ``POST /v1/spotlights/intents``."""

    object: str
    token: str
    expires_at: int


def invalid_intent(reason: str) -> ApiError:
    return ApiError(ErrorKind.INVALID_INTENT, f"The spotlight intent {reason}.", param="intent")


class Intents:
    """Makes and opens intent tokens."""

    __slots__ = ("_cipher", "_key")

    def __init__(self, pepper: bytes) -> None:
        self._key = derive_key(pepper, "spotlight-intent")
        self._cipher: AESGCM | None = None

    def _sealer(self) -> AESGCM:
        """The cipher, made by the first intent issued or opened, not by every worker at
        start: cryptography costs about 7 MB of RSS per worker (bench/CHANGELOG.md, issue 53)."""
        if self._cipher is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._cipher = AESGCM(self._key)
        return self._cipher

    def issue(self, pid: str, now: float) -> IntentIssued:
        intent = Intent(pid, secrets.token_hex(16), int(now) + INTENT_TTL_S)
        nonce = os.urandom(12)
        sealed = self._sealer().encrypt(nonce, msgspec.json.encode(intent), _AAD)
        token = TOKEN_PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")
        return IntentIssued(object="spotlight.intent", token=token, expires_at=intent.expires_at)

    def open(self, token: str, now: float) -> Intent:
        """The intent ``token`` carries, or the 400 saying why not (forged, changed, or
        expired: an intent's own time, not a callback's, says when it ends)."""
        if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_CHARS:
            raise invalid_intent("is not one svc issued")
        text = token[len(TOKEN_PREFIX) :]
        cipher = self._sealer()
        from cryptography.exceptions import InvalidTag  # loaded by _sealer's import

        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            opened = cipher.decrypt(raw[:12], raw[12:], _AAD)
            intent = Intent(*msgspec.json.decode(opened, type=tuple[str, str, int]))
        except (binascii.Error, ValueError, InvalidTag, msgspec.DecodeError):
            raise invalid_intent("is not one svc issued") from None
        if intent.expires_at <= now:
            raise invalid_intent("has expired")
        return intent
