"""Key secret → identity, with a per-process cache and an argon2id cold path.

Hot path: parse (checksum) → HMAC digest → in-process cache, else one Redis GET. The
mapping never changes for a key's life, so caching it is safe; revocation is enforced by
the key status that every request's script (or status read) checks.

Cold path (Redis lost the mapping): find the key by the id embedded in it, verify the
secret against its argon2id hash, re-warm Redis. Unknown digests are negative-cached and
verifications are rate-limited, so a flood of fake keys cannot burn CPU.

``Authenticator.presented`` is the one way a request's key is checked, on every route that
takes one: the streams use the key it yields (``PresentedKey``), the other routes through
``Authenticator.authenticated``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from app.core.errors import ApiError, ErrorKind, KeyRecordMissing, invalid_api_key
from app.credits.key_records import KeyRecords
from app.credits.outcomes import Identity, Refusal, ScriptStatus
from app.credits.throttle_counts import ThrottleCounts
from app.keys.format import ParsedKey, bearer_secret, digest, parse_key, verify_secret
from app.keys.refusals import key_refusal, refusal_error
from app.keys.throttle import FailedAuthThrottle
from app.store import Store

T = TypeVar("T")


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.clock = clock
        self.stamp = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class PresentedKey:
    """A request's key once identified (``Authenticator.presented``): its identity, and
    the one retry when Redis lost the key's record."""

    __slots__ = ("_address", "_auth", "_authorization", "ident")

    def __init__(
        self, auth: Authenticator, authorization: str | None, address: str, ident: Identity
    ) -> None:
        self._auth = auth
        self._authorization = authorization
        self._address = address
        self.ident = ident

    async def use(self, use: Callable[[Identity], Awaitable[T]]) -> T:
        """What ``use`` makes of the key; ``use`` checks the key's status in Redis
        (revocation) with its own work. When Redis lost the key's record
        (``KeyRecordMissing``) the record is restored once from the durable store and
        ``use`` runs again."""
        try:
            return await use(self.ident)
        except KeyRecordMissing:
            self.ident = await self._auth.restore(self._authorization, self._address)
            return await use(self.ident)


class Authenticator:
    """Turns an ``Authorization`` header into an ``Identity`` or a 401."""

    def __init__(
        self,
        key_records: KeyRecords,
        counts: ThrottleCounts,
        store: Store,
        pepper: bytes,
        *,
        cache_size: int = 100_000,
        negative_ttl_s: float = 30.0,
        cold_per_s: float = 10.0,
        cold_per_address_s: int = 0,
        throttle: FailedAuthThrottle | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``cold_per_s``: argon2 verifications this worker makes a second at most;
        ``cold_per_address_s``: those one client address may start a second on every worker
        of every instance together (0: no such limit). ``clock`` times the caches and the
        worker's budget; ``wall_clock`` is the time a key's expiry is compared with."""
        self.key_records = key_records
        self.counts = counts
        self.throttle = throttle or FailedAuthThrottle(0, 0.0)  # none given: no throttling
        self.store = store
        self.pepper = pepper
        self.cache_size = cache_size
        self.negative_ttl_s = negative_ttl_s
        self.clock = clock
        self.wall_clock = wall_clock
        self._known: OrderedDict[str, Identity] = OrderedDict()
        self._unknown: OrderedDict[str, float] = OrderedDict()
        self._cold_budget = TokenBucket(cold_per_s, max(1.0, cold_per_s), clock)
        self.cold_per_address_s = cold_per_address_s
        self.cold_verifications = 0

    async def identify(self, authorization: str | None, address: str | None = None) -> Identity:
        """The identity of the request's key; raises 401 for missing, malformed or unknown.
        ``address``: the client's, for the cold path's budget per address."""
        secret = bearer_secret(authorization)
        parsed = parse_key(secret) if secret else None
        if secret is None or parsed is None:
            raise invalid_api_key()
        key_digest = digest(self.pepper, secret)
        ident = self._known.get(key_digest)
        if ident is not None:
            return ident
        if self._is_known_unknown(key_digest):
            raise invalid_api_key()
        ident = await self.key_records.lookup_digest(key_digest)
        if ident is None:
            ident = await self._cold_path(secret, parsed, key_digest, address)
        self._remember(key_digest, ident)
        return ident

    @contextlib.asynccontextmanager
    async def presented(
        self, authorization: str | None, address: str
    ) -> AsyncIterator[PresentedKey]:
        """The request's key, identified (401 when missing, malformed or unknown), for the
        block inside to use (``PresentedKey.use``). A wrong key, identified here or refused
        by the block's own work (revoked, expired), counts against ``address``, and is
        answered 429 once ``address`` is over its failed-authentication limit; a valid key
        is served whatever else came from its address."""
        async with self.throttle.guarding(address):
            ident = await self.identify(authorization, address)
            yield PresentedKey(self, authorization, address, ident)

    async def authenticated(
        self, authorization: str | None, address: str, use: Callable[[Identity], Awaitable[T]]
    ) -> T:
        """What ``use`` makes of the request's key: the one authentication path of every
        route that takes a key.

        The key is identified (401 when missing, malformed or unknown) and ``use``d; ``use``
        checks the key's status in Redis (revocation) with its own work, or with
        ``key_active``. When Redis lost the key's record (``KeyRecordMissing``) the record
        is restored once from the durable store and ``use`` runs again. A wrong key, at any
        of these steps, counts against ``address``, and is answered 429 once ``address``
        is over its failed-authentication limit; a valid key is served whatever else came
        from its address."""
        async with self.presented(authorization, address) as key:
            return await key.use(use)

    async def key_active(self, ident: Identity) -> Identity:
        """``ident`` once Redis says its key is active (a ``use`` for ``authenticated``, for
        routes whose own work does not check the key)."""
        refusal = key_refusal(await self.key_records.key_status(ident, self.wall_clock()))
        if refusal is not None:
            raise refusal
        return ident

    async def allowed_models(self, ident: Identity) -> frozenset[str] | None:
        """The models ``ident``'s key may use (None: all), once Redis says it is active (a
        ``use`` for ``authenticated``)."""
        access = await self.key_records.key_access(ident, self.wall_clock())
        refusal = key_refusal(access.status)
        if refusal is not None:
            raise refusal
        return access.models

    async def start_uncharged(self, ident: Identity) -> None:
        """Count a request that holds no credits (a token count) against its key's
        ``rate_limit_rpm``, in the log a completion's start is counted in; over the limit,
        the 429 a completion gets (nothing counted)."""
        now = self.wall_clock()
        wait_ms = await self.key_records.start_request(ident, now)
        if wait_ms > 0:
            raise refusal_error(Refusal(ScriptStatus.RATE_LIMITED, wait_ms, now))

    async def restore(self, authorization: str | None, address: str) -> Identity:
        """Re-create a key's Redis records from the durable store (cold path: argon2,
        rate-limited), for a key whose record Redis lost while this worker cached it."""
        secret = bearer_secret(authorization)
        parsed = parse_key(secret) if secret else None
        if secret is None or parsed is None:
            raise invalid_api_key()
        key_digest = digest(self.pepper, secret)
        self.forget(key_digest)
        ident = await self._cold_path(secret, parsed, key_digest, address)
        self._remember(key_digest, ident)
        return ident

    async def _cold_budget_allows(self, address: str | None) -> bool:
        """Whether an argon2 verification may start now: the client address's share across
        every worker and instance (counted in Redis), then this worker's."""
        if address is not None and self.cold_per_address_s > 0:
            counted = await self.counts.count_cold_auth(address)
            if counted.attempts > self.cold_per_address_s:
                return False
        return self._cold_budget.take()

    def forget(self, key_digest: str) -> None:
        self._known.pop(key_digest, None)

    def _remember(self, key_digest: str, ident: Identity) -> None:
        self._known[key_digest] = ident
        if len(self._known) > self.cache_size:
            self._known.popitem(last=False)

    def _is_known_unknown(self, key_digest: str) -> bool:
        until = self._unknown.get(key_digest)
        if until is None:
            return False
        if until > self.clock():
            return True
        del self._unknown[key_digest]
        return False

    def _mark_unknown(self, key_digest: str) -> None:
        self._unknown[key_digest] = self.clock() + self.negative_ttl_s
        if len(self._unknown) > self.cache_size:
            self._unknown.popitem(last=False)

    async def _cold_path(
        self, secret: str, parsed: ParsedKey, key_digest: str, address: str | None
    ) -> Identity:
        record = await self.store.get_key(parsed.kid)
        if record is None or record.environment != parsed.environment:
            self._mark_unknown(key_digest)
            raise invalid_api_key()
        if not await self._cold_budget_allows(address):
            raise ApiError(
                ErrorKind.AUTH_RATE_LIMITED,
                "Too many authentication attempts. Please retry shortly.",
                headers={"retry-after": "1"},
            )
        self.cold_verifications += 1
        if not await asyncio.to_thread(verify_secret, record.secret_hash, secret):
            self._mark_unknown(key_digest)
            raise invalid_api_key()
        ident = self.key_records.identity(record)
        await self.key_records.put_key(ident, record)
        await self.key_records.map_digest(key_digest, ident)
        return ident
