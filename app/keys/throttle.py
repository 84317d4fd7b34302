"""Failed-authentication throttling per client address, and who the client is behind proxies.

An address that has presented ``limit`` invalid keys (or admin tokens) within ``window_s``
is refused with 429 for the rest of that window, valid credentials included:
guessing keys is hopeless anyway (50 random characters), but a flood of them costs digests,
Redis lookups and log lines, and a client that keeps sending a wrong key is broken.

Counting is per worker process and in memory: the refusal check is one dictionary lookup
on every authenticated request, with no Redis round trip. With N workers an address gets
up to N × ``limit`` failures a window before every worker refuses it.

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
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

from app.core.errors import ApiError, ErrorKind

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


class FailedAuthThrottle:
    """Counts failed authentications per address in fixed windows; refuses blocked ones."""

    def __init__(
        self,
        limit: int,
        window_s: float,
        *,
        max_addresses: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_addresses = max_addresses
        self.clock = clock
        self._windows: OrderedDict[str, tuple[float, int]] = OrderedDict()  # start, failures

    def check(self, address: str) -> None:
        """Raise 429 when ``address`` is over its limit in the current window."""
        entry = self._windows.get(address)
        if entry is None or entry[1] < self.limit or self.limit <= 0:
            return
        left = entry[0] + self.window_s - self.clock()
        if left <= 0:
            del self._windows[address]
            return
        raise ApiError(
            ErrorKind.AUTH_RATE_LIMITED,
            "Too many failed authentication attempts from this address. Retry later.",
            headers={"retry-after": str(math.ceil(left)), "x-should-retry": "false"},
        )

    @contextmanager
    def guarding(self, address: str) -> Iterator[None]:
        """Refuse ``address`` when it is over its limit (429), then run the block inside and
        count a failed authentication when it raises one."""
        self.check(address)
        try:
            yield
        except ApiError as exc:
            if exc.kind in FAILED_AUTHENTICATION:
                self.failed(address)
            raise

    def failed(self, address: str) -> None:
        """Count one failed authentication of ``address``."""
        if self.limit <= 0:
            return
        now = self.clock()
        start, failures = self._windows.pop(address, (now, 0))
        if now - start >= self.window_s:
            start, failures = now, 0
        self._windows[address] = (start, failures + 1)  # most recent last: oldest evicted
        if len(self._windows) > self.max_addresses:
            self._windows.popitem(last=False)
