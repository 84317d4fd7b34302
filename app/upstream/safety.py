"""The ``safety_identifier`` svc sends a provider with every request.

Providers block an abusive end user by the identifier they are sent; without one, their
only handle is svc's own provider key, which every account shares. So svc names the
account behind each request, without naming it: ``svc_`` + the unpadded URL-safe base64 of
HMAC-SHA256 under a key derived from the pepper (``app.core.pepper``), of the account id
and, when the client sent one, its own ``safety_identifier`` (else its ``user``). That is
47 characters (OpenAI takes up to 64), the same in every worker and after restarts (until
the pepper changes), different per account and per end user of an account, and neither
the account id nor the client's value can be read back from it.

What is hashed is the account id's length, ``:``, the account id, then the client's value
(none: nothing), so no account and value can hash as another pair.
"""

from __future__ import annotations

import base64
import functools
import hmac

from app.core.pepper import derive_key

PREFIX = "svc_"
PURPOSE = "svc safety identifier"
CACHE_SIZE = 4096
CACHED_VALUE_CHARS = 64
"""Client values longer than this are hashed each time instead of kept in the cache
(OpenAI's own limit on ``safety_identifier``): the cache's memory stays bounded whatever
clients send."""


class SafetyIdentifiers:
    """Makes the identifiers of one pepper. The last ``cache_size`` (account, client value)
    pairs are remembered: an HMAC and its encoding cost ~1.8 µs, a cache hit ~0.05 µs."""

    __slots__ = ("_cached", "_key")

    def __init__(self, pepper: bytes, cache_size: int = CACHE_SIZE) -> None:
        self._key = derive_key(pepper, PURPOSE)
        self._cached = functools.lru_cache(maxsize=cache_size)(self._derive)

    def of(self, pid: str, client_value: str | None = None) -> str:
        """The identifier of account ``pid``'s requests that carry ``client_value`` (the
        client's own identifier of its end user; None or "": none)."""
        if client_value and len(client_value) > CACHED_VALUE_CHARS:
            return self._derive(pid, client_value)
        return self._cached(pid, client_value or None)

    def _derive(self, pid: str, client_value: str | None) -> str:
        message = f"{len(pid)}:{pid}{client_value or ''}".encode("utf-8", "surrogatepass")
        mac = hmac.digest(self._key, message, "sha256")
        return PREFIX + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
