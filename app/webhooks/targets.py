"""Where a webhook may point: no request of svc's may reach its own network (SSRF).

A URL must be ``https`` and its host must resolve only to public addresses: not loopback,
link-local, site-local (``fec0::/10``, deprecated but still routed inside some networks),
private, shared, reserved, multicast or unspecified. An IPv6 address that carries an IPv4
one is judged as that IPv4 address: IPv4-mapped (``::ffff:0:0/96``), IPv4-translated
(``::ffff:0:0:0/96``), IPv4-compatible (``::/96``), 6to4 (``2002::/16``) and NAT64
(``64:ff9b::/96``, and the local-use ``64:ff9b:1::/48`` in its ``/96`` form; its other
forms are refused, since which IPv4 address they reach depends on the network's prefix
length). It is checked when the webhook is created or changed and again at every
delivery, where the connection goes to the addresses just checked (``Target.addresses``),
so a name cannot be rebound to an inside address meanwhile. A delivery through a forward
proxy (``app.core.proxies``) names the host to the proxy, which resolves it again: there
the proxy's own rules have the last word. Hosts in ``SVC_WEBHOOK_ALLOW_HOSTS`` (names,
addresses or CIDR networks, comma-separated) are let through, over ``http`` too.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import SplitResult, urlsplit

import msgspec

from app.core.errors import TargetRefused
from app.core.settings import ENV_PREFIX

ALLOW_HOSTS_SETTING = ENV_PREFIX + "WEBHOOK_ALLOW_HOSTS"  # named in refusals: the way out

MAX_URL_CHARS = 2048
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class AllowList:
    """``SVC_WEBHOOK_ALLOW_HOSTS``: host names, addresses and networks let through."""

    def __init__(self, hosts: frozenset[str], networks: tuple[Network, ...]) -> None:
        self.hosts = hosts
        self.networks = networks

    @classmethod
    def parse(cls, text: str) -> AllowList:
        hosts: set[str] = set()
        networks: list[Network] = []
        for entry in (part.strip() for part in text.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def names(self, host: str) -> bool:
        """Whether ``host`` itself is let through (by name, or as an address listed)."""
        if host.lower().rstrip(".") in self.hosts:
            return True
        address = _address(host)
        return address is not None and self.covers(address)

    def covers(self, address: Address) -> bool:
        return any(address in network for network in self.networks)


NOBODY = AllowList(frozenset(), ())


def _address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


_COMPATIBLE = ipaddress.IPv6Network("::/96")
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # SIIT (RFC 2765)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_LAST_32_BITS = 0xFFFF_FFFF


def judged(address: Address) -> Address | None:
    """The address a connection to ``address`` reaches, as far as the check can tell: the
    IPv4 address an IPv6 one carries (see the module's docstring), else the address itself;
    None when it cannot tell (a local-use NAT64 address not in its ``/96`` form)."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    inner = address.ipv4_mapped or address.sixtofour
    if inner is not None:
        return inner
    if address in _COMPATIBLE or address in _TRANSLATED or address in _NAT64:
        return ipaddress.IPv4Address(int(address) & _LAST_32_BITS)
    if address in _NAT64_LOCAL:
        if int(address) >> 32 != int(_NAT64_LOCAL.network_address) >> 32:
            return None
        return ipaddress.IPv4Address(int(address) & _LAST_32_BITS)
    return address


def public(address: Address) -> bool:
    """Whether an address is on the public internet (not svc's own network)."""
    reached = judged(address)
    if reached is None or reached.is_multicast:
        return False
    # Python counts site-local (fec0::/10) as global: deprecated, it is still inside
    site_local = isinstance(reached, ipaddress.IPv6Address) and reached.is_site_local
    return reached.is_global and not site_local


def parse_url(url: str, allow: AllowList) -> SplitResult:
    """The URL's parts, or ``TargetRefused`` when its form is not allowed (before any
    lookup)."""
    if len(url) > MAX_URL_CHARS or not url.isprintable() or " " in url:
        raise TargetRefused(f"'url' must be an absolute URL of at most {MAX_URL_CHARS} characters.")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError as exc:
        raise TargetRefused("'url' is not a valid URL.") from exc
    host = parts.hostname
    if not host:
        raise TargetRefused("'url' must name a host.")
    if parts.username is not None or parts.password is not None:
        raise TargetRefused("'url' must not carry credentials.")
    if parts.scheme == "https" or (parts.scheme == "http" and allow.names(host)):
        return parts
    raise TargetRefused(
        "'url' must be https. A receiver on your own network (http, or a private address) "
        f"needs its host in the operator's {ALLOW_HOSTS_SETTING}."
    )


def _checked(addresses: tuple[str, ...], allow: AllowList) -> None:
    for text in addresses:
        address = _address(text)
        if address is None or not (public(address) or allow.covers(address)):
            raise TargetRefused(
                "'url' resolves to a private, loopback or link-local address; webhooks "
                "must reach the public internet unless the operator lists the host in "
                f"{ALLOW_HOSTS_SETTING}."
            )


class Target(msgspec.Struct, frozen=True):
    """A URL allowed to be called, and the addresses a connection to it may use: those just
    checked (empty for a host let through by name, which any address of its may serve)."""

    parts: SplitResult
    addresses: tuple[str, ...]


async def check_url(url: str, allow: AllowList) -> Target:
    """The URL's target once its form and every address its host resolves to are allowed;
    ``TargetRefused`` otherwise."""
    parts = parse_url(url, allow)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise TargetRefused("'url' names a host that does not resolve.") from exc
    if allow.names(host):
        return Target(parts, ())
    addresses = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
    _checked(addresses, allow)
    return Target(parts, addresses)
