"""One pipelined connection per worker for the hot path's script calls.

Every completion makes two script calls. Through redis-py's pooled client each costs more in
Python than its round trip: a connection taken from the pool and given back (a lock, a
condition), a timeout context, the retry wrapper, each argument encoded on its own, a stream
reader's future (measured in bench/CHANGELOG.md). Here a worker sends its script calls on one
connection instead: commands issued in the same loop turn go out in one write, Redis answers
a connection's commands in order, and each reply goes to the oldest caller still waiting.
hiredis parses the replies and redis-py's parser names the errors, so a caller sees the same
exceptions (``NoScriptError``, ``ConnectionError``, ``TimeoutError``) as from redis-py.

Only a single server (``redis://``, ``rediss://``, ``unix://``): a Cluster routes each call by
slot and keeps redis-py's cluster client.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ReadOnlyError
from redis.exceptions import TimeoutError as RedisTimeoutError

_CLOSED = "Connection closed by server."


def pack_command(args: tuple[Any, ...]) -> bytes:
    """A command in RESP, its arguments encoded as redis-py encodes them (text as UTF-8,
    numbers as their decimal text). hiredis packs in C: 2-3 µs for a reserve's 26 arguments
    where Python took 13."""
    packed: bytes = hiredis.pack_command(args)
    return packed


class _Connection(asyncio.Protocol):
    """One connection: commands written in order, replies matched first in, first out.

    A command unanswered for ``timeout_s`` fails with ``TimeoutError`` at its own deadline,
    as under redis-py's socket timeout, and the connection turns stale: new commands go to
    a new one. A stale connection stays open while any caller on it is still within its
    time, and its late replies are dropped in order; it closes once none is. Closing it
    earlier would fail callers before their time while Redis may still run their commands
    (a reserve's give-up time is its caller's deadline: it must not stop waiting sooner).
    """

    def __init__(self, timeout_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._timeout_s = timeout_s
        self._reader = hiredis.Reader(
            protocolError=InvalidResponse, replyError=BaseParser.parse_error
        )
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._deadlines: deque[float] = deque()
        self._expired = 0  # the first commands waiting whose callers got a timeout
        self._out: list[bytes] = []
        self._watchdog: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.stale = False
        self.sent = 0  # commands sent on it so far: the number of the last one
        self._replica_wait: tuple[int, asyncio.Future[Any]] | None = None

    @property
    def usable(self) -> bool:
        return not (self.closed or self.stale)

    def call(self, command: bytes) -> asyncio.Future[Any]:
        """Send ``command``; the future gets its reply (an error reply as its exception)."""
        waiter = self._loop.create_future()
        if self.closed:
            waiter.set_exception(RedisConnectionError(_CLOSED))
            return waiter
        deadline = self._loop.time() + self._timeout_s
        self._waiting.append(waiter)
        self._deadlines.append(deadline)
        if self._watchdog is None:
            self._watchdog = self._loop.call_at(deadline, self._check_deadlines)
        if not self._out:
            self._loop.call_soon(self._flush)  # the commands of this loop turn, one write
        self._out.append(command)
        self.sent += 1
        return waiter

    def wait_replicas(self, after: int, replicas: int, timeout_ms: int) -> asyncio.Future[Any]:
        """A ``WAIT`` sent after the command numbered ``after``: its reply is how many
        replicas have every write this connection sent before it. Redis counts a client's
        writes, so the WAIT must go on the connection the write went on; one sent after
        several callers' commands answers for all of them (a burst of settles shares one)."""
        pending = self._replica_wait
        if pending is not None and pending[0] > after:
            return pending[1]
        waiter = self.call(pack_command(("WAIT", replicas, timeout_ms)))
        self._replica_wait = (self.sent, waiter)
        return waiter

    def close(self) -> None:
        self._fail(RedisConnectionError("Connection closed by the client."))

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and not self.closed:
            self.transport.write(b"".join(out))

    def _check_deadlines(self) -> None:
        """Time out every command past its deadline (the oldest come first)."""
        self._watchdog = None
        now = self._loop.time()
        waiting, deadlines = self._waiting, self._deadlines
        first_live = self._expired
        while first_live < len(deadlines) and deadlines[first_live] <= now:
            waiter = waiting[first_live]
            if not waiter.done():
                waiter.set_exception(RedisTimeoutError("Timeout reading from Redis"))
            first_live += 1
        if first_live > self._expired:
            self._expired = first_live
            self.stale = True
        if first_live < len(deadlines):
            self._watchdog = self._loop.call_at(deadlines[first_live], self._check_deadlines)
        elif self.stale:
            self._close_transport()  # no caller is waiting on it any more

    def retire(self) -> None:
        """No new commands on it: closed once its callers still waiting have their replies."""
        self.stale = True
        if not self._waiting:
            self._close_transport()

    def _close_transport(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()

    def _fail(self, error: Exception) -> None:
        """Close for good: every command still waiting gets ``error``."""
        self._close_transport()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        waiting, self._waiting = self._waiting, deque()
        self._deadlines.clear()
        self._expired = 0
        for waiter in waiting:
            if not waiter.done():
                waiter.set_exception(error)

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        waiting = self._waiting
        try:
            while (reply := self._reader.gets()) is not False:
                if not waiting:
                    raise InvalidResponse("a reply nobody asked for")
                waiter = waiting.popleft()
                self._deadlines.popleft()
                if self._expired:
                    self._expired -= 1
                if waiter.done():  # its caller timed out or was cancelled: dropped
                    continue
                if isinstance(reply, Exception):
                    waiter.set_exception(reply)
                else:
                    waiter.set_result(reply)
        except InvalidResponse as exc:
            self._fail(RedisConnectionError(f"Protocol error: {exc}"))
            return
        if self.stale and not waiting:
            self._close_transport()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError(_CLOSED))


class PipelinedRedis:
    """Sends commands on one connection, opened when first needed and again after it
    failed or turned stale (a command on it timed out). A command that meets a broken
    connection goes out once more on a new one, as the pooled client's do
    (``app.kv.client``: every svc write is idempotent); a timeout is not retried."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float,
        name: str | None = None,
        locate: Callable[[], Awaitable[tuple[str, int]]] | None = None,
    ) -> None:
        """``locate``: where the primary is, asked before each connection opens (Sentinel,
        ``app.kv.sentinel``); the URL's host and port otherwise."""
        options: dict[str, Any] = dict(parse_url(url))
        self._locate = locate
        self._path: str | None = options.get("path")
        self._host = str(options.get("host", "localhost"))
        self._port = int(options.get("port", 6379))
        self._tls = _tls_context(url, options) if url.startswith("rediss://") else None
        self._handshake = _handshake(options, name)
        self._timeout_s = timeout_s
        self._conn: _Connection | None = None
        self._connections: set[_Connection] = set()
        self._opening: asyncio.Task[_Connection] | None = None

    async def execute(self, *args: Any) -> Any:
        """Run one command; its reply as redis-py would return it (bytes undecoded)."""
        command = pack_command(args)
        try:
            return await self._call(command)
        except RedisConnectionError:
            return await self._call(command)

    async def execute_replicated(
        self, replicas: int, timeout_ms: int, *args: Any
    ) -> tuple[Any, int]:
        """Run one command, then ``WAIT`` until ``replicas`` replicas have it or
        ``timeout_ms`` passed: its reply, and how many replicas acknowledged it."""
        command = pack_command(args)
        try:
            conn, number, reply = await self._sent(command)
        except RedisConnectionError:
            conn, number, reply = await self._sent(command)
        acked = await asyncio.shield(conn.wait_replicas(number, replicas, timeout_ms))
        return reply, int(acked)

    async def _call(self, command: bytes) -> Any:
        conn = await self._connection()
        try:
            return await conn.call(command)
        except ReadOnlyError:
            raise _demoted(conn) from None

    async def _sent(self, command: bytes) -> tuple[_Connection, int, Any]:
        """``_call``, also naming the connection the command went on and its number there."""
        conn = await self._connection()
        waiter = conn.call(command)
        number = conn.sent
        try:
            return conn, number, await waiter
        except ReadOnlyError:
            raise _demoted(conn) from None

    async def aclose(self) -> None:
        if self._opening is not None:
            self._opening.cancel()
        for conn in self._connections:
            conn.close()
        self._connections.clear()
        self._conn = None

    async def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and conn.usable:
            return conn
        # Callers that find the connection down wait for one attempt to open it together.
        opening = self._opening
        if opening is None:
            opening = self._opening = asyncio.ensure_future(self._open())
            opening.add_done_callback(self._opened)
        return await asyncio.shield(opening)

    def _opened(self, task: asyncio.Task[_Connection]) -> None:
        self._opening = None
        if not task.cancelled() and task.exception() is None:
            self._conn = task.result()
            # a stale connection left behind closes itself once its callers are done;
            # ``aclose`` closes those still open
            self._connections = {c for c in self._connections if not c.closed} | {self._conn}

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(self._timeout_s):
                if self._path is not None:
                    _, conn = await loop.create_unix_connection(
                        lambda: _Connection(self._timeout_s), self._path
                    )
                else:
                    host, port = (
                        (self._host, self._port) if self._locate is None else await self._locate()
                    )
                    _, conn = await loop.create_connection(
                        lambda: _Connection(self._timeout_s), host, port, ssl=self._tls
                    )
                for command in self._handshake:
                    await conn.call(command)
        except BaseException as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, TimeoutError):
                raise RedisTimeoutError("Timeout connecting to Redis") from None
            if isinstance(exc, OSError):
                raise RedisConnectionError(f"Error connecting to Redis: {exc.strerror}") from None
            raise
        return conn


def _demoted(conn: _Connection) -> RedisConnectionError:
    """A primary that became a replica (a failover) answered READONLY: the command did not
    run, and the connection is left for one to the primary the locator names now."""
    conn.retire()
    return RedisConnectionError("The primary svc was connected to is now a replica")


def _handshake(options: dict[str, Any], name: str | None) -> list[bytes]:
    """What a new connection sends first: credentials, database, client name."""
    commands = []
    password = options.get("password")
    if password is not None:
        username = options.get("username")
        auth = ("AUTH", username, password) if username else ("AUTH", password)
        commands.append(pack_command(auth))
    db = int(options.get("db") or 0)
    if db:
        commands.append(pack_command(("SELECT", db)))
    if name:
        commands.append(pack_command(("CLIENT", "SETNAME", name)))
    return commands


def _tls_context(url: str, options: dict[str, Any]) -> ssl.SSLContext:
    """TLS as redis-py sets it up from the URL's ``ssl_cert_reqs`` and ``ssl_ca_certs``."""
    context = ssl.create_default_context(cafile=options.get("ssl_ca_certs"))
    reqs = str(options.get("ssl_cert_reqs", "required")).lower()
    if reqs in ("none", "optional"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE if reqs == "none" else ssl.CERT_OPTIONAL
    return context
