"""The OIDC token a Pub/Sub push subscription sends Real-time developer notifications with
(``Authorization: Bearer <JWT>``), checked with google-auth against Google's signing
certificates (``SVC_GOOGLE_OIDC_CERTS_URL``: a JSON map of key id → PEM certificate).

google-auth checks the RS256 signature, the expiry and the audience; svc checks that Google
issued it for the subscription's service account (``email``, verified). The certificates
are fetched with httpx and kept for the ``max-age`` Google's answer gives them (one fetch at
a time per worker); a token naming a key id they lack makes svc fetch them again, at most
once a minute, so forged key ids cannot make svc hammer Google.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from app import __version__
from app.core.errors import invalid_push_token, service_unavailable
from app.core.proxies import proxy_for
from app.upstream.outbound import OutboundClients

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("svc.purchases.google")

ISSUERS = ("accounts.google.com", "https://accounts.google.com")
DEFAULT_MAX_AGE_S = 3600.0  # certificates without a max-age: kept an hour
REFETCH_INTERVAL_S = 60.0  # the least time between fetches for an unknown key id
MAX_CERTS_BYTES = 1_048_576
TIMEOUT_S = 10.0
CLOCK_SKEW_S = 10  # between Google's clock and this host's
_MAX_AGE = re.compile(r"max-age=(\d+)")


class PushVerifier:
    """Checks push tokens for one subscription (``audience``, ``email``)."""

    def __init__(
        self,
        certs_url: str,
        *,
        audience: str,
        email: str,
        timeout_s: float = TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.certs_url = certs_url
        self.audience = audience
        self.email = email
        self.timeout_s = timeout_s
        self.clock = clock
        self.fetches = 0
        self._certs: dict[str, str] = {}
        self._certs_until = 0.0
        self._fetched_at: float | None = None
        self._fetching = asyncio.Lock()
        self._clients = OutboundClients(timeout_s=timeout_s)

    async def verify(self, authorization: str | None) -> None:
        """Returns when ``authorization`` carries a valid push token; 401
        ``invalid_push_token`` otherwise, 503 when the certificates cannot be had."""
        from google.auth import jwt
        from google.auth.exceptions import GoogleAuthError

        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise invalid_push_token("The request has no 'Authorization: Bearer' token.")
        token = token.strip()
        certs = await self._certs_for(_key_id(token))
        try:
            claims: Mapping[str, Any] = jwt.decode(  # type: ignore[no-untyped-call]
                token, certs=certs, audience=self.audience, clock_skew_in_seconds=CLOCK_SKEW_S
            )
        except (ValueError, GoogleAuthError):
            raise invalid_push_token(
                "The push token is malformed, expired, not signed by Google, or for another "
                "audience."
            ) from None
        if claims.get("iss") not in ISSUERS:
            raise invalid_push_token("The push token was not issued by Google.")
        if claims.get("email") != self.email or claims.get("email_verified") is not True:
            raise invalid_push_token("The push token is another service account's.")

    async def _certs_for(self, key_id: str | None) -> dict[str, str]:
        """Google's certificates, fresh; fetched again when they lack ``key_id`` (at most
        once per REFETCH_INTERVAL_S)."""
        now = self.clock()
        fresh = now < self._certs_until
        if fresh and (key_id is None or key_id in self._certs):
            return self._certs
        async with self._fetching:
            now = self.clock()
            if now < self._certs_until and (key_id is None or key_id in self._certs):
                return self._certs  # fetched while this caller waited
            recent = self._fetched_at is not None and now - self._fetched_at < REFETCH_INTERVAL_S
            if now < self._certs_until and recent:
                return self._certs  # an unknown key id: decode refuses it
            self._fetched_at = now
            self._certs, max_age = await self._fetch()
            self._certs_until = now + max_age
        return self._certs

    async def _fetch(self) -> tuple[dict[str, str], float]:
        import httpx  # imported where a call is made (app.upstream.outbound says why)

        self.fetches += 1
        url = httpx.URL(self.certs_url)
        client = self._clients.client(proxy_for(url.scheme, url.host))
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await client.get(url, headers={"user-agent": f"svc/{__version__}"})
        except (TimeoutError, httpx.HTTPError) as exc:
            log.warning("Google's OIDC certificates could not be fetched: %s", type(exc).__name__)
            raise service_unavailable() from None
        if response.status_code != 200 or len(response.content) > MAX_CERTS_BYTES:
            log.warning("Google's OIDC certificates URL answered %d", response.status_code)
            raise service_unavailable()
        try:
            certs = msgspec.json.decode(response.content, type=dict[str, str])
        except msgspec.DecodeError:
            log.warning("Google's OIDC certificates are not a JSON map of key id to PEM")
            raise service_unavailable() from None
        return certs, _max_age(response)

    async def close(self) -> None:
        await self._clients.close()


def _max_age(response: httpx.Response) -> float:
    found = _MAX_AGE.search(response.headers.get("cache-control", ""))
    return float(found.group(1)) if found else DEFAULT_MAX_AGE_S


def _key_id(token: str) -> str | None:
    """The ``kid`` of the token's header (unverified: it only picks the certificate)."""
    import base64

    head = token.split(".", 1)[0]
    try:
        header = msgspec.json.decode(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, msgspec.DecodeError):
        return None
    kid = header.get("kid") if isinstance(header, dict) else None
    return kid if isinstance(kid, str) else None
