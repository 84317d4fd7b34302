"""The Lua scripts: read from package data, registered once, called by name.

One file per atomic operation in ``lua/``, each opening with its KEYS, ARGV and return
shape. A rule more than one script keeps (the argument checks, an earned pool's expiry, a
key's usability, the models a key allows) is written once, in ``lua/lib/``, and a script
takes it with a line ``--- @include "lib/<name>.lua"`` (bullmq's form). ``load_script_sources``
expands those lines once, when the sources are read: an include is expanded where it is
first named (an include may name others) and left out wherever it is named again, so its
functions are defined once per script; an include that does not exist fails the load.
Calls go out as EVALSHA; redis-py loads a script again after NOSCRIPT (``SCRIPT FLUSH``, a
failover), and when it is flushed once more in between, EVAL carries the source itself.
"""

from __future__ import annotations

import logging
import re
import time
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from app.core.errors import ScriptLoadError
from app.core.metrics import METRICS
from app.kv.client import RedisClient
from app.kv.pipelined import PipelinedRedis

SCRIPT_NAMES = (
    "reserve",
    "settle",
    "extend",
    "balance",
    "grant",
    "take_back",
    "expire_earned",
    "low_balance",
    "open_account",
    "correct_pools",
    "account_status",
    "put_key",
    "update_key",
    "revoke_key",
    "idempotency_claim",
    "idempotency_close",
    "window_count",
    "rate_start",
)
REPLICATED = frozenset(("grant", "take_back", "settle"))
"""The scripts whose writes ``SVC_REDIS_MIN_REPLICAS`` waits for: money in (a purchase,
a reward, a grant; a take-back) and a request's settle."""
log = logging.getLogger("svc.redis")
INCLUDE = re.compile(r'^--- @include "([\w/.-]+\.lua)"[ \t]*$', re.MULTILINE)


def expand_includes(source: str, folder: Traversable, seen: set[str] | None = None) -> str:
    """``source`` with each of its ``--- @include`` lines replaced by the named file (its own
    includes expanded first), each file at most once: ``seen`` holds what was expanded."""
    done = set() if seen is None else seen

    def include(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in done:
            return f"-- {name}: included above"
        if not name.startswith("lib/") or ".." in name:
            raise ScriptLoadError(f"includes come from lib/: {name}")
        path = folder.joinpath(name)
        if not path.is_file():
            raise ScriptLoadError(f"no such include: {name}")
        done.add(name)
        return expand_includes(path.read_text(), folder, done).rstrip("\n")

    return INCLUDE.sub(include, source)


def load_script_sources() -> dict[str, str]:
    """Every script as sent to Redis: its own file (package data of ``app.credits``) with its
    includes expanded."""
    folder = resources.files(__package__).joinpath("lua")
    return {
        name: expand_includes(folder.joinpath(f"{name}.lua").read_text(), folder)
        for name in SCRIPT_NAMES
    }


class Scripts:
    """Every script, registered with one Redis client. Calls go out on ``calls``, a worker's
    pipelined connection, when there is one (a single server), else on ``redis``."""

    def __init__(
        self,
        redis: RedisClient,
        calls: PipelinedRedis | None = None,
        *,
        min_replicas: int = 0,
        wait_ms: int = 1000,
    ) -> None:
        """``min_replicas``: wait for that many replicas (up to ``wait_ms``) after each of
        the ``REPLICATED`` scripts (a single primary's replicas)."""
        self.redis = redis
        self._calls = calls
        self._execute = calls.execute if calls is not None else redis.execute_command
        self.min_replicas = min_replicas
        self.wait_ms = wait_ms
        self._sources = sources = load_script_sources()
        self._registered: dict[str, AsyncScript] = {
            name: redis.register_script(src) for name, src in sources.items()
        }

    async def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Call one script; its reply as Redis gave it. EVALSHA goes out as a plain command
        (redis-py's script objects cost ~6-10 µs more per call, twice per completion)."""
        script = self._registered[name]
        if self.min_replicas and name in REPLICATED:
            return await self._replicated(name, keys, args)
        try:
            return await self._execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            # Not in the server's cache (a restart, SCRIPT FLUSH, a failover): EVAL carries
            # the source itself, cannot miss, and caches the script for the next EVALSHA.
            source = self._sources[name]
            return await self._execute("EVAL", source, len(keys), *keys, *args)

    async def _replicated(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """``run``, then WAIT on the same connection (Redis counts a client's own writes).
        Fewer replicas than asked when the wait ends is counted and logged, not refused: the
        script ran, and what a failover loses of money in is applied again
        (``app.accounts.lost_entries``)."""
        sha, source = self._registered[name].sha, self._sources[name]
        try:
            reply, acked = await self._with_wait("EVALSHA", sha, len(keys), *keys, *args)
        except NoScriptError:
            reply, acked = await self._with_wait("EVAL", source, len(keys), *keys, *args)
        short = acked < self.min_replicas
        METRICS.labelled(METRICS.replica_waits, "short" if short else "acked").inc()
        if short:
            log.warning("%s reached %d of %d replicas in time", name, acked, self.min_replicas)
        return reply

    async def _with_wait(self, *command: Any) -> tuple[Any, int]:
        if self._calls is not None:
            return await self._calls.execute_replicated(self.min_replicas, self.wait_ms, *command)
        pipe = self.redis.pipeline(transaction=False)  # one connection: the write, its WAIT
        pipe.execute_command(*command)
        pipe.execute_command("WAIT", self.min_replicas, self.wait_ms)
        reply, acked = await pipe.execute(raise_on_error=False)
        if isinstance(reply, Exception):
            raise reply
        return reply, int(acked)

    @property
    def shas(self) -> list[str]:
        """The SHA1 of every script: what EVALSHA names and SCRIPT EXISTS asks about."""
        return [script.sha for script in self._registered.values()]

    async def loaded(self) -> bool:
        """Whether Redis holds every script now; loads the missing ones (after a
        ``SCRIPT FLUSH`` or a failover) so that the answer is yes when Redis works."""
        if all(await self.redis.script_exists(*self.shas)):
            return True
        await self.load()
        return all(await self.redis.script_exists(*self.shas))

    async def load(self) -> None:
        """Load every script into the server's cache (start-up and readiness checks)."""
        for script in self._registered.values():
            await self.redis.script_load(script.script)


class RedisClock:
    """Redis's clock as this host sees it: the offset ``Holds.sync_clock`` last measured.
    Shared by the ``Holds`` of one process (the requests' and the background tasks')."""

    def __init__(self) -> None:
        self.offset_s = 0.0  # Redis's TIME minus this host's clock

    def now(self) -> float:
        return time.time() + self.offset_s

    async def sync(self, redis: RedisClient) -> float:
        """Measure the offset with one ``TIME`` (half the round trip is the error); returns it."""
        before = time.time()
        seconds, micros = await redis.time()
        after = time.time()
        self.offset_s = seconds + micros / 1e6 - (before + after) / 2
        return self.offset_s
