"""AdMob's verifier keys (``SVC_ADMOB_KEYS_URL``: Google's JSON
``{"keys": [{"keyId", "pem", "base64"}]}``): which URLs svc may fetch them from, reading
the file, and their cache.

The keys are kept in Redis for every worker (at most 24 hours) and in each worker's memory.
A callback naming a key id none of them knows makes the worker fetch the keys again: one
fetch at a time (concurrent callers wait for the same one), at most one per
``refetch_interval_s`` per worker, and at most one per interval across the workers (a
lease in Redis), so forged key ids cannot make svc hammer Google. Reading a callback and
checking its signature against a key is ``app.spotlights.admob``'s.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import secrets
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import msgspec

from app import __version__
from app.core.errors import ConfigError, KeysUnavailable
from app.core.proxies import proxy_for
from app.core.urls import secure_url
from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from app.upstream.outbound import OutboundClients

if TYPE_CHECKING:
    import httpx
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
    from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

    KeySet = dict[int, EllipticCurvePublicKey]

log = logging.getLogger("svc.spotlights")

KEYS_TTL_S = 24 * 3600  # the longest the keys are trusted without asking Google again
MAX_KEYS_BYTES = 1_048_576  # Google's file is a few hundred bytes
USER_AGENT = f"svc-spotlights/{__version__}"


class _KeyEntry(msgspec.Struct):
    key_id: int = msgspec.field(name="keyId")
    pem: str = ""
    der: str = msgspec.field(default="", name="base64")  # SubjectPublicKeyInfo


class _KeyFile(msgspec.Struct):
    keys: list[msgspec.Raw]


def _public_key(entry: _KeyEntry) -> PublicKeyTypes:
    from cryptography.hazmat.primitives.serialization import (
        load_der_public_key,
        load_pem_public_key,
    )

    if entry.der:
        return load_der_public_key(base64.b64decode(entry.der, validate=True))
    return load_pem_public_key(entry.pem.encode())


def parse_keys(raw: bytes) -> KeySet:
    """The P-256 keys of a verifier-keys JSON by key id; an entry that is not one is
    skipped with a warning. Raises ``KeysUnavailable`` when the JSON is broken or holds no
    usable key."""
    # imported by the first keys read (a worker's first AdMob callback), not by every worker
    # at start: cryptography costs about 7 MB of RSS per worker (bench/CHANGELOG.md, issue 53)
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, EllipticCurvePublicKey

    try:
        entries = msgspec.json.decode(raw, type=_KeyFile).keys
    except msgspec.DecodeError as exc:
        raise KeysUnavailable(f"the AdMob verifier keys are not readable: {exc}") from None
    keys: KeySet = {}
    for raw_entry in entries:
        try:
            entry = msgspec.json.decode(raw_entry, type=_KeyEntry, strict=False)
            key = _public_key(entry)
        except (msgspec.DecodeError, binascii.Error, ValueError, UnsupportedAlgorithm) as exc:
            log.warning("AdMob verifier key skipped: %s", str(exc)[:200])
            continue
        if not isinstance(key, EllipticCurvePublicKey) or not isinstance(key.curve, SECP256R1):
            log.warning("AdMob verifier key %d skipped: not a P-256 EC key", entry.key_id)
            continue
        keys[entry.key_id] = key
    if not keys:
        raise KeysUnavailable("the AdMob verifier keys hold no P-256 key")
    return keys


def check_keys_url(url: str) -> None:
    """Raises ``ConfigError`` unless svc can fetch keys from ``url``: ``https://``,
    ``file://``, or ``http://`` to a loopback address (tests, a local mirror)."""
    parts = urlsplit(url)
    if (parts.scheme.lower() == "file" and parts.path) or secure_url(url):
        return
    raise ConfigError(
        "SVC_ADMOB_KEYS_URL must be an https:// or file:// URL (http:// only to loopback)"
    )


class VerifierKeys:
    """AdMob's verifier keys, shared by the workers through Redis; ``key(key_id)`` is the
    one way in. ``fetches`` counts this instance's trips to the URL."""

    def __init__(
        self,
        url: str,
        redis: RedisClient,
        layout: KeySpace,
        *,
        timeout_s: float = 5.0,
        refetch_interval_s: float = 60.0,
        ttl_s: int = KEYS_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_keys_url(url)
        self.url = url
        self.redis = redis
        self.layout = layout
        self.timeout_s = timeout_s
        self.refetch_interval_s = refetch_interval_s
        self.ttl_s = min(ttl_s, KEYS_TTL_S)
        self.clock = clock
        self.fetches = 0
        self._token = secrets.token_hex(8)
        self._keys: KeySet | None = None
        self._keys_until = 0.0  # clock time the memory copy stops being trusted
        self._last_fetch: float | None = None  # clock time of this worker's latest fetch
        self._loading: asyncio.Task[KeySet | None] | None = None
        self._clients = OutboundClients(timeout_s=timeout_s)

    async def key(self, key_id: int) -> EllipticCurvePublicKey | None:
        """The key named ``key_id``, or None when the keys (refetched if allowed) have no
        such key. Raises ``KeysUnavailable`` when no key set can be had at all, and
        Redis's errors (``app.kv.client.REDIS_ERRORS``) as they come."""
        held = await self._held()
        if held is not None and key_id in held:
            return held[key_id]
        keys = await self._refetch(cached=held is not None)
        return None if keys is None else keys.get(key_id)

    async def _held(self) -> KeySet | None:
        """The keys in memory while they are fresh, else Redis's copy (kept in memory for
        what remains of its life)."""
        if self._keys is not None and self.clock() < self._keys_until:
            return self._keys
        self._keys = None
        return await self._from_redis()

    async def _from_redis(self) -> KeySet | None:
        name = self.layout.admob_keys()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(name)
            pipe.pttl(name)
            raw, pttl = await pipe.execute()
        if raw is None:
            return None
        try:
            keys = parse_keys(raw if isinstance(raw, bytes) else str(raw).encode())
        except KeysUnavailable as exc:  # what svc wrote: another version's, or damaged
            log.warning("cached AdMob verifier keys ignored: %s", exc)
            return None
        life_s = self.ttl_s if int(pttl) < 0 else min(int(pttl) / 1000, self.ttl_s)
        self._remember(keys, life_s)
        return keys

    def _remember(self, keys: KeySet, life_s: float) -> None:
        self._keys = keys
        self._keys_until = self.clock() + life_s

    async def _refetch(self, *, cached: bool) -> KeySet | None:
        """The keys after one more fetch, or those held when a fetch is not due yet;
        callers that come while a fetch runs wait for it instead of starting another."""
        if self._loading is None:
            now = self.clock()
            if self._last_fetch is not None and now - self._last_fetch < self.refetch_interval_s:
                if cached:
                    return self._keys
                raise KeysUnavailable("the AdMob verifier keys could not be fetched lately")
            self._last_fetch = now
            self._loading = asyncio.create_task(self._load(cached=cached))
            self._loading.add_done_callback(self._landed)
        # shielded: a caller that gives up (its client left) does not cancel the others' fetch
        return await asyncio.shield(self._loading)

    def _landed(self, task: asyncio.Task[KeySet | None]) -> None:
        self._loading = None
        if not task.cancelled():
            task.exception()  # retrieved here too, in case every waiter left

    async def _load(self, *, cached: bool) -> KeySet | None:
        if cached and not await self._leased():
            # another worker refetched within the interval: what it found is in Redis
            return await self._from_redis() or self._keys
        raw = await self._fetch()
        keys = parse_keys(raw)
        await self.redis.set(self.layout.admob_keys(), raw, ex=self.ttl_s)
        self._remember(keys, self.ttl_s)
        log.info("AdMob verifier keys fetched: %d key(s)", len(keys))
        return keys

    async def _leased(self) -> bool:
        px = max(1, int(self.refetch_interval_s * 1000))
        taken = await self.redis.set(self.layout.admob_keys_lease(), self._token, nx=True, px=px)
        return bool(taken)

    async def _fetch(self) -> bytes:
        """The key file's bytes; raises ``KeysUnavailable`` when it cannot be had."""
        import httpx  # imported where a call is made (app.upstream.outbound says why)

        self.fetches += 1
        parts = urlsplit(self.url)
        try:
            async with asyncio.timeout(self.timeout_s):
                if parts.scheme.lower() == "file":
                    path = Path(urllib.request.url2pathname(parts.path))
                    raw = await asyncio.to_thread(path.read_bytes)
                else:
                    raw = await self._get(httpx.URL(self.url))
        except (TimeoutError, httpx.HTTPError, OSError) as exc:
            raise KeysUnavailable(
                f"the AdMob verifier keys could not be fetched: {type(exc).__name__}"
            ) from None
        if len(raw) > MAX_KEYS_BYTES:
            raise KeysUnavailable("the AdMob verifier keys file is too large")
        return raw

    async def _get(self, url: httpx.URL) -> bytes:
        client = self._clients.client(proxy_for(url.scheme, url.host))
        async with client.stream("GET", url, headers={"user-agent": USER_AGENT}) as response:
            if response.status_code != 200:
                raise KeysUnavailable(
                    f"the AdMob verifier keys URL answered {response.status_code}"
                )
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_KEYS_BYTES:
                    break  # refused by the caller; no need to read the rest
            return bytes(body)

    async def close(self) -> None:
        """Close the HTTP clients (the worker's shutdown); a fetch under way is cancelled."""
        if self._loading is not None:
            self._loading.cancel()
        await self._clients.close()
