"""An https upstream reached through a forward proxy: ``CONNECT host:port`` to the proxy, its
``2xx`` answer read, then TLS with the upstream over the same socket (the proxy relays
bytes it cannot read)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import TypeVar

import msgspec

from app.core.proxies import Proxy

# A proxy's answer to CONNECT is a status line and a few headers; more is not an answer.
_ANSWER_LIMIT = 16 * 1024
_P = TypeVar("_P", bound=asyncio.Protocol)


class Origin(msgspec.Struct, frozen=True):
    """Where an upstream is: its host (an IPv6 address without brackets), port and scheme."""

    host: str
    port: int
    tls: bool

    @property
    def authority(self) -> str:
        """``host:port`` as CONNECT and an absolute URL name it (IPv6 in brackets)."""
        return f"{self._host}:{self.port}"

    @property
    def host_header(self) -> str:
        """The ``Host`` header: the port only when it is not the scheme's own."""
        return self._host if self.port == (443 if self.tls else 80) else self.authority

    @property
    def _host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host


class ProxyRefused(ConnectionError):
    """The proxy did not open the tunnel; the message says what it answered (never its
    credentials)."""


class _ConnectAnswer(asyncio.Protocol):
    """Reads the proxy's answer to CONNECT: the status of its head, nothing past it."""

    def __init__(self) -> None:
        self._head = bytearray()
        self.answered: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        if self.answered.done():
            return
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            if len(self._head) > _ANSWER_LIMIT:
                self.answered.set_exception(ProxyRefused("the proxy's answer has no end"))
            return
        if end + 4 != len(self._head):  # the upstream speaks only after our TLS hello
            self.answered.set_exception(ProxyRefused("the proxy sent data after its answer"))
            return
        self.answered.set_result(_status(bytes(self._head[:end])))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answered.done():
            self.answered.set_exception(ProxyRefused("the proxy closed the connection"))


def _status(head: bytes) -> int:
    """The status code of a response head's first line (``HTTP/1.1 200 Connection
    established``); 0 when the line is not one."""
    parts = head.split(b"\r\n", 1)[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        return 0
    return int(parts[1])


def connect_request(proxy: Proxy, origin: Origin) -> bytes:
    lines = [f"CONNECT {origin.authority} HTTP/1.1", f"host: {origin.authority}"]
    lines += [f"{name}: {value}" for name, value in proxy.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def open_tunnel(
    loop: asyncio.AbstractEventLoop,
    proxy: Proxy,
    origin: Origin,
    tls: ssl.SSLContext,
    protocol: Callable[[], _P],
) -> _P:
    """A protocol made by ``protocol``, connected over TLS to ``origin`` through ``proxy``.
    Raises ``ProxyRefused`` (a ``ConnectionError``) when the proxy answers anything but 2xx,
    and ``OSError`` or ``ssl.SSLError`` when a connection or the handshake fails."""
    transport, answer = await loop.create_connection(_ConnectAnswer, proxy.host, proxy.port)
    try:
        transport.write(connect_request(proxy, origin))
        status = await answer.answered
        if not 200 <= status < 300:
            raise ProxyRefused(f"the proxy answered CONNECT with status {status}")
        conn = protocol()
        secured = await loop.start_tls(transport, conn, tls, server_hostname=origin.host)
    except BaseException:
        transport.close()
        raise
    if secured is None:  # the transport was closed during the handshake
        raise ProxyRefused("the proxy closed the connection")
    # start_tls hands the protocol its new transport without calling connection_made
    conn.connection_made(secured)
    return conn
