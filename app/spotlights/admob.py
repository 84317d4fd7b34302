"""AdMob's server-side verification (SSV) callbacks: reading one, checking its signature,
and the verifier keys it is checked against.

Google signs the callback's query string up to ``&signature=``, as sent: the message is
those bytes, never a re-encoding of the parsed parameters. ``signature`` (URL-safe base64
of a DER ECDSA P-256/SHA-256 signature) and ``key_id`` are always the last two parameters,
in that order; a query where they are not is refused before any key is looked at.

The keys (``SVC_ADMOB_KEYS_URL``: Google's JSON ``{"keys": [{"keyId", "pem", "base64"}]}``)
are kept in Redis for every worker (at most 24 hours) and in each worker's memory. A
callback naming a key id none of them knows makes the worker fetch the keys again: one
fetch at a time (concurrent callers wait for the same one), at most one per
``refetch_interval_s`` per worker, and at most one per interval across the workers (a
lease in Redis), so forged key ids cannot make svc hammer Google.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import logging
import re
import secrets
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote_to_bytes, urlsplit

import msgspec
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ec import (
    ECDSA,
    SECP256R1,
    EllipticCurvePublicKey,
)
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.hazmat.primitives.serialization import load_der_public_key, load_pem_public_key

from app import __version__
from app.core.errors import AdMobRejected, ConfigError, KeysUnavailable
from app.core.proxies import proxy_for
from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from app.upstream.outbound import OutboundClients

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("svc.spotlights")

MAX_QUERY_BYTES = 4096  # Google's callbacks are well under 1 KiB
MAX_FUTURE_MS = 300_000  # a callback's timestamp may run this far ahead of svc's clock
KEYS_TTL_S = 24 * 3600  # the longest the keys are trusted without asking Google again
MAX_KEYS_BYTES = 1_048_576  # Google's file is a few hundred bytes
USER_AGENT = f"svc-spotlights/{__version__}"

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

KeySet = dict[int, EllipticCurvePublicKey]


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
        return unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8")
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


# --- The verifier keys ------------------------------------------------------------------


class _KeyEntry(msgspec.Struct):
    key_id: int = msgspec.field(name="keyId")
    pem: str = ""
    der: str = msgspec.field(default="", name="base64")  # SubjectPublicKeyInfo


class _KeyFile(msgspec.Struct):
    keys: list[msgspec.Raw]


def _public_key(entry: _KeyEntry) -> PublicKeyTypes:
    if entry.der:
        return load_der_public_key(base64.b64decode(entry.der, validate=True))
    return load_pem_public_key(entry.pem.encode())


def parse_keys(raw: bytes) -> KeySet:
    """The P-256 keys of a verifier-keys JSON by key id; an entry that is not one is
    skipped with a warning. Raises ``KeysUnavailable`` when the JSON is broken or holds no
    usable key."""
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


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_keys_url(url: str) -> None:
    """Raises ``ConfigError`` unless svc can fetch keys from ``url``: ``https://``,
    ``file://``, or ``http://`` to a loopback address (tests, a local mirror)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "file" and parts.path:
        return
    if scheme == "https" and parts.hostname:
        return
    if scheme == "http" and parts.hostname and _loopback(parts.hostname):
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
