"""Counters of a client address's attempts, shared by every worker and instance: failed
authentications (wrong API keys or metrics tokens; wrong admin tokens apart) and cold-path
(argon2) verifications (``window_count.lua``)."""

from __future__ import annotations

from typing import NamedTuple

from app.credits.script_args import ScriptArgs
from app.credits.scripts import Scripts
from app.kv.layout import KeySpace

WINDOW_COUNT = ScriptArgs("window_count", "window_ms")


class WindowCount(NamedTuple):
    """A client address's attempts in a window shared by every worker and instance."""

    attempts: int  # this one included
    left_s: float  # until the window ends


class ThrottleCounts:
    """The throttles' counters, over the scripts of one set of connections."""

    def __init__(self, scripts: Scripts, layout: KeySpace) -> None:
        self.layout = layout
        self.redis = scripts.redis
        self._run = scripts.run

    async def count_failed_auth(self, address: str, window_s: float) -> WindowCount:
        """One more failed authentication of ``address`` in its window (every worker's)."""
        return await self._window_count(self.layout.failed_auths(address), window_s)

    async def count_failed_admin(self, address: str, window_s: float) -> WindowCount:
        """One more wrong admin token from ``address`` in its window (every worker's): a
        counter apart from ``count_failed_auth``'s, so wrong API keys never lock the admin out."""
        return await self._window_count(self.layout.failed_admin_tokens(address), window_s)

    async def failed_admin(self, address: str) -> WindowCount:
        """The wrong admin tokens ``address`` has in its window, counting none (0 and no time
        left when it has no window open): what decides whether the right one is refused."""
        counter = self.layout.failed_admin_tokens(address)
        pipe = self.redis.pipeline(transaction=False)  # one key: one slot, one round trip
        pipe.get(counter)
        pipe.pttl(counter)
        attempts, ms_left = await pipe.execute()
        return WindowCount(int(attempts or 0), max(0, int(ms_left)) / 1000)

    async def count_cold_auth(self, address: str) -> WindowCount:
        """One more cold-path verification of ``address`` in the current second."""
        return await self._window_count(self.layout.cold_auths(address), 1.0)

    async def _window_count(self, counter: str, window_s: float) -> WindowCount:
        attempts, ms_left = await self._run(
            "window_count", [counter], WINDOW_COUNT(window_ms=max(1, round(window_s * 1000)))
        )
        return WindowCount(int(attempts), int(ms_left) / 1000)
