"""The Lua scripts: read from package data, registered once, called by name.

One file per atomic operation in ``lua/``, each opening with its KEYS, ARGV and return
shape. Each is sent with ``lua/lib/checks.lua`` in front of it: the argument checks every
script runs before its first write, and the one reading of an Idempotency-Key's record.
Calls go out as EVALSHA; redis-py loads a script again after NOSCRIPT (``SCRIPT FLUSH``, a
failover), and when it is flushed once more in between, EVAL carries the source itself.
"""

from __future__ import annotations

import time
from importlib import resources
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from app.kv.client import RedisClient
from app.kv.pipelined import PipelinedRedis

PRELUDE = "lib/checks.lua"
SCRIPT_NAMES = (
    "reserve",
    "settle",
    "extend",
    "balance",
    "grant",
    "expire_earned",
    "low_balance",
    "open_account",
    "put_key",
    "update_key",
    "revoke_key",
    "idempotency_claim",
    "idempotency_close",
    "window_count",
)


def load_script_sources() -> dict[str, str]:
    """Every script as sent to Redis: the argument checks, then the script's own file (package
    data of ``app.credits``)."""
    folder = resources.files(__package__).joinpath("lua")
    prelude = folder.joinpath(PRELUDE).read_text()
    return {
        name: prelude + "\n" + folder.joinpath(f"{name}.lua").read_text() for name in SCRIPT_NAMES
    }


class Scripts:
    """Every script, registered with one Redis client. Calls go out on ``calls``, a worker's
    pipelined connection, when there is one (a single server), else on ``redis``."""

    def __init__(self, redis: RedisClient, calls: PipelinedRedis | None = None) -> None:
        self.redis = redis
        self._execute = calls.execute if calls is not None else redis.execute_command
        self._sources = sources = load_script_sources()
        self._registered: dict[str, AsyncScript] = {
            name: redis.register_script(src) for name, src in sources.items()
        }

    async def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Call one script; its reply as Redis gave it. EVALSHA goes out as a plain command
        (redis-py's script objects cost ~6-10 µs more per call, twice per completion)."""
        script = self._registered[name]
        try:
            return await self._execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            # Not in the server's cache (a restart, SCRIPT FLUSH, a failover): EVAL carries
            # the source itself, cannot miss, and caches the script for the next EVALSHA.
            source = self._sources[name]
            return await self._execute("EVAL", source, len(keys), *keys, *args)

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
    """Redis's clock as this host sees it: the offset ``RedisLedger.sync_clock`` last measured.
    Shared by the ledgers of one process (the requests' and the background tasks')."""

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
