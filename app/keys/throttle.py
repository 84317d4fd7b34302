"""Failed-authentication throttling per client address, and who the client is behind proxies.

An address that has presented ``limit`` invalid keys (or metrics tokens) within ``window_s``
gets 429 for every further invalid one until the window ends, on every worker of every
instance: the failures are counted in Redis (``window_count.lua``, one script call per
failure, never one for a valid key). A worker that has seen an address reach the limit
answers its further wrong credentials 429 without counting them again, until the window
ends. So exactly ``limit`` wrong keys per window get a 401, wherever they land.

The admin token is the exception (``refuse_over_limit``): its wrong values are counted by a
throttle of their own (another Redis counter), and an address over that limit is refused
even the right token until its window ends, so wrong tokens can never be followed by a right
one from there: the token reaches every account, and its bearer is one operator, not a crowd
behind a NAT. Wrong API keys never count there: behind a balancer without trusted proxies
(or a shared NAT) anyone could otherwise lock the operator out with bogus keys.

A valid key is never refused for what others sent from its address: behind a NAT or a
carrier-grade NAT one address is many clients, and a neighbour's wrong keys must not lock
the others out. The credentials are checked first (a digest, the worker's cache, at most
one Redis GET, which a key seen unknown skips for a while); only a failure meets the
throttle. Guessing keys is hopeless anyway (50 random characters); the argon2 cold path has
a budget of its own per address.

Behind a load balancer every request comes from the balancer's address, so the client's
own address is taken from ``X-Forwarded-For`` — but only when the direct peer is one of the
configured trusted proxies, and then the rightmost address the trusted proxies did not add
(anything to its left was written by the client and may be forged).
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager

from app.core.errors import ApiError, ErrorKind
from app.credits.throttle_counts import WindowCount
from app.kv.client import REDIS_ERRORS

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
UNIX_SOCKET = "unix"
# What a failed authentication is: a wrong API key or a wrong admin (or metrics) token.
# A revoked key is not a guess, and a cold-path refusal (AUTH_RATE_LIMITED) is not a failure.
FAILED_AUTHENTICATION = (ErrorKind.INVALID_API_KEY, ErrorKind.ADMIN_UNAUTHORIZED)


def parse_networks(spec: str) -> tuple[Network, ...]:
    """``"10.0.0.0/8, 127.0.0.1"`` → networks; raises ``ValueError`` on a bad entry."""
    return tuple(
        ipaddress.ip_network(part.strip(), strict=False) for part in spec.split(",") if part.strip()
    )


def _trusted(address: str, trusted: Sequence[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in trusted)


def client_address(
    peer: str | None, forwarded_for: Iterable[str], trusted: Sequence[Network]
) -> str:
    """The address to throttle: the peer, or behind trusted proxies the rightmost
    ``X-Forwarded-For`` hop they did not add. ``forwarded_for`` holds the header values."""
    if peer is None:
        return UNIX_SOCKET
    if not trusted or not _trusted(peer, trusted):
        return peer
    hops = [hop.strip() for value in forwarded_for for hop in value.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, trusted):
            return hop
    return hops[0] if hops else peer


CountFailure = Callable[[str, float], Awaitable[WindowCount]]
"""One more failed authentication of an address in a window of so many seconds."""
ReadFailures = Callable[[str], Awaitable[WindowCount]]
"""The failed authentications an address has in its window, counting none."""


class FailedAuthThrottle:
    """Failed authentications per address, counted across every worker and instance (in
    Redis, by ``count``); this worker's own list of the addresses it saw over the limit."""

    def __init__(
        self,
        limit: int,
        window_s: float,
        count: CountFailure | None = None,
        *,
        read: ReadFailures | None = None,
        max_addresses: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``limit`` 0 (or no ``count``): no throttling. ``read``: what
        ``refuse_over_limit`` asks Redis (None: this worker's own list alone)."""
        self.limit = limit
        self.window_s = window_s
        self.max_addresses = max_addresses
        self.clock = clock
        self._count = count
        self._read = read
        self._blocked: OrderedDict[str, float] = OrderedDict()  # address -> until (clock)

    def check(self, address: str) -> None:
        """Raise 429 when this worker saw ``address`` over its limit in its current window
        (asked about a failed authentication only: valid credentials always pass)."""
        until = self._blocked.get(address)
        if until is None:
            return
        left = until - self.clock()
        if left <= 0:
            del self._blocked[address]
            return
        raise _refusal(left)

    async def refuse_over_limit(self, address: str) -> None:
        """Raise 429 when ``address`` is over its limit of failed authentications (on any
        worker or instance: Redis is read, nothing is counted), whatever it presents next:
        for the admin token's own throttle (its wrong values alone), whose right value must
        not be served after as many wrong ones as an address may send."""
        if self.limit <= 0 or self._count is None:
            return
        self.check(address)
        if self._read is None:
            return
        try:
            counted = await self._read(address)
        except REDIS_ERRORS:
            return  # as ``failed``: the token's own check stands; the throttle resumes with Redis
        if counted.attempts >= self.limit and counted.left_s > 0:
            raise _refusal(counted.left_s)

    @asynccontextmanager
    async def guarding(self, address: str) -> AsyncIterator[None]:
        """Run the block inside (which checks the credentials) and count a failed
        authentication when it raises one: past the limit, that failure is answered 429
        instead of 401 (once this worker knows the address is past it, without counting it
        again). Credentials that pass are never refused here."""
        try:
            yield
        except ApiError as exc:
            if exc.kind in FAILED_AUTHENTICATION:
                self.check(address)
                await self.failed(address)
            raise

    async def failed(self, address: str) -> None:
        """Count one failed authentication of ``address``; 429 when it is past the limit."""
        if self.limit <= 0 or self._count is None:
            return
        try:
            counted = await self._count(address, self.window_s)
        except REDIS_ERRORS:
            return  # the failure's own answer stands; counting resumes with Redis
        if counted.attempts < self.limit:
            return
        self._blocked.pop(address, None)
        self._blocked[address] = self.clock() + counted.left_s  # most recent last
        if len(self._blocked) > self.max_addresses:
            self._blocked.popitem(last=False)
        if counted.attempts > self.limit:
            raise _refusal(counted.left_s)


def _refusal(left_s: float) -> ApiError:
    return ApiError(
        ErrorKind.AUTH_RATE_LIMITED,
        "Too many failed authentication attempts from this address. Retry later.",
        headers={"retry-after": str(max(1, math.ceil(left_s))), "x-should-retry": "false"},
    )
