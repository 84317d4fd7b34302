"""granian's RSGI interface as svc uses it: the shapes of its scope and protocol objects,
the request body, and its address strings.

The shapes are Protocols, not granian's classes, so the in-process transport of the tests
(``tests/support/rsgi_transport.py``) can stand in for the server; granian's objects match them,
and tests/e2e/test_granian_contract.py holds granian to what the fakes assume.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Protocol

# granian's public RSGI module names it; its re-export is not marked as one for type checkers
from granian.rsgi import ProtocolClosed  # type: ignore[attr-defined]

from app.core.errors import ClientDisconnected

__all__ = [
    "HTTPProtocol",
    "Headers",
    "ProtocolClosed",
    "Scope",
    "StreamTransport",
    "body_chunks",
    "content_length",
    "parse_address",
]


class Headers(Protocol):
    """The request headers. Names are lower-case; granian leaves out a value that is not
    visible ASCII (``get`` answers as if it were absent; the name is still ``in`` them)."""

    def __contains__(self, key: str) -> bool: ...

    def get(self, key: str, default: None = None) -> str | None: ...

    def get_all(self, key: str) -> list[str]: ...

    def items(self) -> list[tuple[str, str]]: ...


class Scope(Protocol):
    """One HTTP request. ``path`` is percent-decoded, ``query_string`` is not; ``client``
    and ``server`` are ``host:port`` strings (``[::1]:port`` for IPv6)."""

    @property
    def http_version(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def scheme(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def query_string(self) -> str: ...
    @property
    def client(self) -> str: ...
    @property
    def server(self) -> str: ...
    @property
    def headers(self) -> Headers: ...


class StreamTransport(Protocol):
    """A streamed response body. It has no end marker: granian ends the body when the
    transport object is released, so a writer drops its reference once done. Once the
    client has gone, ``send_bytes`` raises ``ProtocolClosed`` (or, until the server has
    noticed, still succeeds)."""

    def send_bytes(self, data: bytes) -> Awaitable[None]: ...


class HTTPProtocol(Protocol):
    """The request body in (whole, awaited once, or piece by piece), one response out (the
    first ``response_*`` call wins)."""

    def __call__(self) -> Awaitable[bytes]: ...

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def client_disconnect(self) -> None: ...

    def response_bytes(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None: ...

    def response_stream(self, status: int, headers: list[tuple[str, str]]) -> StreamTransport: ...


def content_length(headers: Headers) -> int | None:
    value = headers.get("content-length")
    return int(value) if value is not None and value.isdigit() else None


async def body_chunks(scope: Scope, protocol: HTTPProtocol) -> AsyncGenerator[bytes, None]:
    """The request body as it arrives, empty chunks left out.

    granian ends the body early, without an error, when the client leaves mid-upload, so
    a body shorter than its ``content-length`` raises ``ClientDisconnected`` at its end (a
    cut chunked body cannot be told from a short one: it reads as complete)."""
    received = 0
    async for chunk in protocol:
        if chunk:
            received += len(chunk)
            yield chunk
    declared = content_length(scope.headers)
    if declared is not None and received < declared:
        raise ClientDisconnected


def parse_address(text: str) -> tuple[str, int] | None:
    """An RSGI ``host:port`` (``[::1]:8000`` for IPv6) as ASGI's ``(host, port)``; None
    for anything else (a Unix socket's path)."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)
