"""Which outbound connections go through a forward proxy: one rule for the upstream client
and the webhook deliverer.

The environment says it, as curl and Python's ``urllib`` read it: ``HTTPS_PROXY`` for
``https`` URLs, ``HTTP_PROXY`` for ``http`` ones, ``ALL_PROXY`` for both when the other is
unset, and ``NO_PROXY`` (comma-separated host names or domain suffixes, ``*`` for all) for
hosts reached directly; the lower-case forms win over the upper-case ones. The standard
library's ``urllib.request`` does the reading and the ``NO_PROXY`` matching, so svc agrees
with every other Python program on the machine.

Only ``http://`` proxies are spoken to (a ``CONNECT`` tunnel carries ``https``); a proxy
URL of another scheme is a configuration error at start-up. A proxy's credentials (its
URL's user and password) become a ``Proxy-Authorization`` header and are never shown.
"""

from __future__ import annotations

import base64
import urllib.request
from collections.abc import Callable
from urllib.parse import unquote, urlsplit

import msgspec

from app.core.errors import ProxyConfigError

# NO_PROXY matching as urllib's own opener does it on every platform (typeshed omits it)
_bypassed: Callable[[str, dict[str, str]], bool] = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]


class Proxy(msgspec.Struct, frozen=True):
    """A forward proxy: where to connect, and what to tell it who we are."""

    host: str
    port: int
    authorization: str | None = None
    """``Basic <base64(user:password)>`` when the proxy URL carries credentials."""

    def __repr__(self) -> str:  # never the credentials, wherever a proxy is shown
        return f"Proxy({self.url})"

    @property
    def url(self) -> str:
        """``http://host:port``: safe to log (no credentials)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        """The headers each request to (or ``CONNECT`` through) this proxy carries."""
        return {} if self.authorization is None else {"proxy-authorization": self.authorization}


def parse_proxy(value: str, variable: str) -> Proxy:
    """A proxy variable's value (``http://[user:password@]host[:port]``; a value with no
    scheme is taken as ``http://``, as curl takes it)."""
    text = value.strip()
    if "://" not in text:
        text = f"http://{text}"
    parts = urlsplit(text)
    if parts.scheme.lower() != "http":
        raise ProxyConfigError(
            f"{variable} must be an http:// proxy URL (got a {parts.scheme}:// one)"
        )
    try:
        port = parts.port or 80
    except ValueError as exc:
        raise ProxyConfigError(f"{variable} has an invalid port") from exc
    if not parts.hostname:
        raise ProxyConfigError(f"{variable} names no host")
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    return Proxy(parts.hostname, port, authorization)


def proxy_for(scheme: str, host: str) -> Proxy | None:
    """The proxy a connection to ``host`` over ``scheme`` (``http`` or ``https``) goes
    through, or None to connect directly; read from the environment at each call (callers
    ask once per upstream or per delivery, not per request)."""
    proxies = urllib.request.getproxies_environment()
    value = proxies.get(scheme) or proxies.get("all")
    if not value or _bypassed(host, proxies):
        return None
    variable = "ALL_PROXY" if scheme not in proxies else f"{scheme.upper()}_PROXY"
    return parse_proxy(value, variable)
