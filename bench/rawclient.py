"""A lean streaming client for the scale levels (``LoadConfig.client = "raw"``): HTTP/1.1 over
a raw asyncio protocol, one keep-alive connection per closed-loop worker, the chunked body
decoded by hand and fed to the same SSE parser and stream checks as the aiohttp client.

At 10,000 open streams aiohttp cost the load generator about 100 µs of CPU per chunk (its
stream reader, futures and iterators per read): a core for 10,000 chunks a second, half of
this 2-core machine, taken from the server under test. Here a chunk costs one
``data_received`` call, a few ``bytes.find`` and the parse and check every client does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import msgspec

from bench.loadgen import (
    LoadConfig,
    StreamChecker,
    StreamShapeError,
    _body,
    _checker,
    _done,
    _failed,
    _headers,
    _path,
    _Sample,
)
from bench.sse import SSEParser


class _Exchange(asyncio.Protocol):
    """One connection; one request at a time on it (``begin``), its response parsed as it
    arrives: the status line and headers, then the chunked body into ``parser`` and
    ``checker``. ``done`` resolves with None when the body ended, or an error kind."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.head = True
        self.status = 0
        self.parser = SSEParser()
        self.checker: StreamChecker | None = None
        self.done: asyncio.Future[str | None] | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._end("ClientConnectionError")

    def begin(self, request: bytes, checker: StreamChecker) -> asyncio.Future[str | None]:
        assert self.transport is not None
        self.buf, self.head, self.status = b"", True, 0
        self.parser, self.checker = SSEParser(), checker
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.done

    def _end(self, error: str | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(error)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        try:
            if self.head and not self._read_head():
                return
            self._read_chunks()
        except StreamShapeError as exc:
            self._end(f"shape: {exc}")
        except (ValueError, msgspec.DecodeError):
            self._end("shape: malformed body")

    def _read_head(self) -> bool:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = self.buf[:end].lower()
        self.status = int(head[9:12])
        self.buf = self.buf[end + 4 :]
        self.head = False
        if self.status != 200:
            self._end(f"http_{self.status}")  # its body is not read: the connection goes
            return False
        if b"transfer-encoding: chunked" not in head:
            self._end("shape: not a chunked stream")
            return False
        return True

    def _read_chunks(self) -> None:
        buf, at = self.buf, 0
        while True:
            line = buf.find(b"\r\n", at)
            if line < 0:
                break
            size = int(buf[at:line], 16)
            if size == 0:
                if len(buf) < line + 4:
                    break
                self.buf = b""
                self._end(None)
                return
            start = line + 2
            if len(buf) < start + size + 2:
                break
            assert self.checker is not None
            for event in self.parser.feed(buf[start : start + size]):
                self.checker.event(*event)
            at = start + size + 2
        self.buf = buf[at:]


async def raw_requests(
    cfg: LoadConfig,
) -> tuple[Callable[[], Awaitable[_Sample]], Callable[[], Awaitable[None]]]:
    """The load generator's ``one`` and ``close`` over raw connections (``bench.loadgen``)."""
    url = urlsplit(cfg.base_url.rstrip("/") + _path(cfg))
    host, port = url.hostname or "127.0.0.1", url.port or 80
    payload = msgspec.json.encode(_body(cfg))
    head = "".join(f"{k}: {v}\r\n" for k, v in _headers(cfg).items())
    request = (
        f"POST {url.path} HTTP/1.1\r\nhost: {host}:{port}\r\n{head}"
        f"content-length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    loop = asyncio.get_running_loop()
    idle: list[_Exchange] = []  # connections between requests (a worker takes one)
    every: list[_Exchange] = []

    async def one() -> _Sample:
        started = time.perf_counter()
        checker = _checker(cfg)
        conn = idle.pop() if idle else None
        try:
            async with asyncio.timeout(cfg.timeout_s):
                if conn is None or conn.lost:
                    _, conn = await loop.create_connection(_Exchange, host, port)
                    every.append(conn)
                error = await conn.begin(request, checker)
            if error is not None:
                if conn.transport is not None:
                    conn.transport.close()
                return _failed(started, error)
            credits = checker.finish()
        except StreamShapeError as exc:
            return _failed(started, f"shape: {exc}")
        except TimeoutError:
            if conn is not None and conn.transport is not None:
                conn.transport.close()
            return _failed(started, "timeout")
        except OSError as exc:
            return _failed(started, type(exc).__name__)
        idle.append(conn)
        return _done(started, checker, credits)

    async def close() -> None:
        for conn in every:
            if conn.transport is not None:
                conn.transport.close()

    return one, close
