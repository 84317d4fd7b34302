"""The app account token: what binds a store purchase to an account.

The companion app asks svc for its account's token (``GET /v1/purchases/account-token``) and
hands it to the store with the purchase (StoreKit's ``appAccountToken``, Play Billing's
``obfuscatedAccountId``); the store signs it into the transaction, so svc credits the
transaction to the token's account only, whoever sends it. The token is a UUID (what
StoreKit accepts) made of HMAC-SHA256 of the account's pid under a key derived from the
pepper: stable for the account, the same in every worker, and saying nothing about the
account or the pepper. Each token served is remembered by the store (the token is a digest,
so the way back from a notification that names only the token is a lookup).
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Callable

import msgspec

from app.core.errors import ApiError, ErrorKind
from app.core.pepper import derive_key
from app.store import Store

PURPOSE = "svc app account token"


class AccountToken(msgspec.Struct, frozen=True):
    """``GET /v1/purchases/account-token``'s answer."""

    app_account_token: str
    object: str = "app_account_token"


def token_of(key: bytes, pid: str) -> str:
    """The account's token under ``key``: a UUID of RFC 9562's version 8 (custom), so that
    no reader takes it for a random or a time-based one."""
    digest = bytearray(hmac.digest(key, pid.encode(), hashlib.sha256)[:16])
    digest[6] = (digest[6] & 0x0F) | 0x80  # version 8
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 9562's variant
    return str(uuid.UUID(bytes=bytes(digest)))


def same_token(a: str, b: str) -> bool:
    """Tokens compared as UUIDs (a store may send one in capitals), in constant time."""
    try:
        return hmac.compare_digest(uuid.UUID(a).bytes, uuid.UUID(b).bytes)
    except ValueError:
        return False


def canonical(token: str) -> str | None:
    """The token as svc writes it (lowercase, hyphenated), or None when it is no UUID."""
    try:
        return str(uuid.UUID(token))
    except ValueError:
        return None


def token_mismatch(field: str) -> ApiError:
    """A purchase whose token is not the calling account's: never credited to the caller."""
    return ApiError(
        ErrorKind.ACCOUNT_TOKEN_MISMATCH,
        f"The purchase's {field} is not this account's app account token (GET "
        "/v1/purchases/account-token): it is credited only to the account it was made for.",
        param=field,
    )


class AccountTokens:
    """The accounts' tokens, and the way back from a token to its account."""

    def __init__(self, store: Store, pepper: bytes, clock: Callable[[], float]) -> None:
        self.store = store
        self.key = derive_key(pepper, PURPOSE)
        self.clock = clock

    def of(self, pid: str) -> str:
        return token_of(self.key, pid)

    async def issue(self, pid: str) -> AccountToken:
        """The account's token, remembered before the app may hand it to a store."""
        token = self.of(pid)
        await self.store.save_account_token(token, pid, int(self.clock()))
        return AccountToken(app_account_token=token)

    def check(self, pid: str, token: str | None, field: str) -> None:
        """400 unless ``token`` is the account's own."""
        if token is None or not same_token(token, self.of(pid)):
            raise token_mismatch(field)

    async def account_of(self, token: str | None) -> str | None:
        """The pid of the token's account; None for a token svc never served (or none)."""
        found = canonical(token) if token else None
        return None if found is None else await self.store.account_of_token(found)
