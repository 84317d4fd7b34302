"""Which URLs svc may call with something worth protecting (keys it fetches, a bearer
token it sends): ``https://``, or ``http://`` to a loopback address (tests, a local
mirror), never plain HTTP across a network."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def loopback(host: str) -> bool:
    """``host`` is this machine: ``localhost`` or a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def secure_url(url: str) -> bool:
    """``url`` is ``https://`` to a host, or ``http://`` to a loopback one."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if not parts.hostname:
        return False
    return scheme == "https" or (scheme == "http" and loopback(parts.hostname))
