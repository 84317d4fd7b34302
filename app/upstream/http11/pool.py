"""The keep-alive pool of one upstream's HTTP/1.1 connections, and how a connection is
opened: directly, or through the forward proxy the environment names for it
(``app.core.proxies``)."""

from __future__ import annotations

import asyncio
import ssl
from collections import deque

from app.core.proxies import Proxy
from app.upstream.config import ProviderConfig
from app.upstream.http11.connection import Connection
from app.upstream.http11.tunnel import Origin, open_tunnel

# Idle connections older than this are closed (as aiohttp's keepalive_timeout did): a
# connection a middlebox dropped without a word must not wait for a request to hang on it.
KEEPALIVE_S = 30.0


class Pool:
    """The connections to one upstream: at most ``limit`` open, idle ones reused last in,
    first out (the most recently used is the least likely to have been closed by the server);
    a request finding none free waits in line."""

    def __init__(self, config: ProviderConfig, origin: Origin, proxy: Proxy | None) -> None:
        self._origin = origin
        self._proxy = proxy
        self._ssl = ssl.create_default_context() if origin.tls else None
        self._limit = config.max_connections
        self._connect_timeout_s = config.connect_timeout_s
        self._idle: list[Connection] = []
        self._all: set[Connection] = set()  # for close()
        self._opening = 0  # connects under way, counted against the limit
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweep: asyncio.TimerHandle | None = None  # while connections are idle

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        # captured once: asking for the running loop costs a getpid() on Python 3.11
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    async def acquire(self, *, fresh: bool) -> Connection:
        """An idle connection, or a new one (``fresh``: always a new one), waiting for a free
        place when ``limit`` are open; within the connect timeout."""
        if not fresh and self._idle:
            return self._take_idle()
        async with asyncio.timeout(self._connect_timeout_s):
            first = True
            while True:
                if not fresh and self._idle:
                    return self._take_idle()
                if fresh and self._idle and self._full():
                    self._idle[0].close()  # the oldest idle one makes room
                if not self._full():
                    return await self._connect()
                await self._wait_turn(first)
                first = False

    def _take_idle(self) -> Connection:
        conn = self._idle.pop()
        conn.idle = False
        conn.idle_s = self.loop.time() - conn.pooled_at
        return conn

    def _full(self) -> bool:
        return len(self._all) + self._opening >= self._limit

    async def _connect(self) -> Connection:
        self._opening += 1
        try:
            conn = await self._open()
        except BaseException:
            self._opening -= 1
            self._pass_turn()
            raise
        self._opening -= 1
        self._all.add(conn)
        return conn

    async def _open(self) -> Connection:
        """A new connection: to the upstream itself, to the proxy (whose connection carries
        plain http requests in absolute form), or through the proxy's CONNECT tunnel (https:
        TLS end to end with the upstream, the proxy sees only bytes)."""
        origin, proxy = self._origin, self._proxy
        if proxy is not None and self._ssl is not None:
            return await open_tunnel(self.loop, proxy, origin, self._ssl, lambda: Connection(self))
        host, port = (origin.host, origin.port) if proxy is None else (proxy.host, proxy.port)
        _, conn = await self.loop.create_connection(
            lambda: Connection(self),
            host,
            port,
            ssl=self._ssl,
            server_hostname=origin.host if self._ssl is not None else None,
        )
        return conn

    async def _wait_turn(self, first: bool) -> None:
        """Wait in line; one woken whose turn another took (a request arriving just then)
        waits again at the front."""
        waiter = self.loop.create_future()
        if first:
            self._waiters.append(waiter)
        else:
            self._waiters.appendleft(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._pass_turn()  # woken, then cancelled: the turn goes to the next
            elif waiter in self._waiters:
                # not there when a turn came by between its cancellation and now: the
                # cancelled waiter was passed over and dropped from the line already
                self._waiters.remove(waiter)
            raise

    def _pass_turn(self) -> None:
        """A place or an idle connection became free: the first in line may take it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def finish(self, conn: Connection, *, clean: bool) -> None:
        """The stream is over: ``clean`` when it was read to its end, else the connection
        holds an unread rest and is closed."""
        if not clean or conn.closed or conn.lost or conn.failure is not None or conn.ended:
            conn.close()
        elif not conn.complete:
            conn.end_then_reuse()
        elif conn.keep_alive:
            self.release(conn)
        else:
            conn.close()

    def release(self, conn: Connection) -> None:
        conn.reuse()
        conn.idle = True
        conn.pooled_at = self.loop.time()
        self._idle.append(conn)
        if self._sweep is None:
            self._sweep = self.loop.call_at(conn.pooled_at + KEEPALIVE_S, self._expire)
        self._pass_turn()

    def _expire(self) -> None:
        """Close the connections idle past KEEPALIVE_S (the oldest are first on the list);
        one timer for the pool, re-armed for the next to expire."""
        self._sweep = None
        now = self.loop.time()
        while self._idle and now - self._idle[0].pooled_at >= KEEPALIVE_S:
            self._idle[0].close()
        if self._idle:
            self._sweep = self.loop.call_at(self._idle[0].pooled_at + KEEPALIVE_S, self._expire)

    def closed(self, conn: Connection) -> None:
        if conn.idle:
            conn.idle = False
            self._idle.remove(conn)
        self._all.discard(conn)
        self._pass_turn()

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for conn in list(self._all):
            conn.close()
