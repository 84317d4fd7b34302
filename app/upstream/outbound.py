"""The HTTP clients of svc's outbound calls other than completions (webhook deliveries,
AdMob's verifier keys): httpx, one client per way out, direct or through each forward proxy
the environment names (``app.core.proxies``). httpx's own reading of the environment is off:
the caller picks the way out by the URL's host name (``NO_PROXY`` matches names), and a
direct call may go to an address it checked itself. TLS trusts the system's store, as the
upstream client does (``SSL_CERT_FILE`` included); no redirect is followed.

httpx is imported where a call is made, never when a module is: a worker that sends no
webhook and fetches no AdMob keys never loads it (httpx and what it pulls in are about
7 MB of RSS per worker, measured; bench/CHANGELOG.md, issue 37)."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

from app.core.proxies import Proxy

if TYPE_CHECKING:
    import httpx


class OutboundClients:
    """The clients, made when first needed and closed together."""

    def __init__(self, *, timeout_s: float, max_connections: int | None = None) -> None:
        self.timeout_s = timeout_s
        self._max_connections = max_connections
        self._clients: dict[Proxy | None, httpx.AsyncClient] = {}

    def client(self, proxy: Proxy | None) -> httpx.AsyncClient:
        """The client of one way out: ``proxy``, or direct for None."""
        client = self._clients.get(proxy)
        if client is None:
            import httpx  # here, not above: see the module's docstring

            client = self._clients[proxy] = httpx.AsyncClient(
                trust_env=False,
                proxy=None if proxy is None else httpx.Proxy(proxy.url, headers=proxy.headers),
                verify=ssl.create_default_context(),
                timeout=self.timeout_s,
                limits=httpx.Limits(max_connections=self._max_connections),
                follow_redirects=False,
            )
        return client

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
