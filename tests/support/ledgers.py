"""The owners of svc's Redis data over one set of scripts, as the tests build them: what
``app.runtime.Services`` builds for the requests, without the rest of the services."""

from __future__ import annotations

from typing import Any

from app.core.settings import Settings
from app.credits.holds import Holds
from app.credits.idempotency import IdempotencyRecords
from app.credits.key_records import KeyRecords
from app.credits.money import Money
from app.credits.outcomes import Hold, Settlement, Tokens
from app.credits.scripts import RedisClock, Scripts
from app.credits.throttle_counts import ThrottleCounts
from app.credits.usage_counts import UsageCounts
from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from app.kv.pipelined import PipelinedRedis
from tests.support.pricing import rates_for


class ChargingHolds(Holds):
    """``Holds`` whose ``settle`` also takes what a test wants charged (``credits_used``,
    with ``prompt_tokens`` and ``completion_tokens``) and sends settle.lua rates that charge
    exactly that (``tests.support.pricing.rates_for``); without it, ``Holds.settle``."""

    async def settle(  # type: ignore[override]
        self,
        hold: Hold,
        *,
        credits_used: int | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        **kwargs: Any,
    ) -> Settlement:
        if credits_used is not None:
            kwargs["rates"] = rates_for(credits_used, prompt_tokens, completion_tokens)
            kwargs["tokens"] = Tokens(prompt_tokens, completion_tokens)
        return await super().settle(hold, **kwargs)


class Ledgers:
    """``holds``, ``money``, ``keys``, ``usage``, ``throttle`` and ``idempotency`` over one
    ``Scripts``."""

    def __init__(
        self,
        redis: RedisClient,
        layout: KeySpace,
        *,
        cap_ttl_s: int,
        usage_ttl_s: int,
        command_timeout_s: float | None = None,
        redis_clock: RedisClock | None = None,
        script_calls: PipelinedRedis | None = None,
        pepper: bytes = b"pepper",
    ) -> None:
        self.redis = redis
        self.layout = layout
        self.scripts = Scripts(redis, script_calls)
        self.holds = ChargingHolds(
            self.scripts,
            layout,
            cap_ttl_s=cap_ttl_s,
            usage_ttl_s=usage_ttl_s,
            command_timeout_s=command_timeout_s,
            redis_clock=redis_clock,
        )
        self.money = Money(self.scripts, layout, cap_ttl_s=cap_ttl_s)
        self.keys = KeyRecords(self.scripts, layout)
        self.usage = UsageCounts(self.scripts, layout)
        self.throttle = ThrottleCounts(self.scripts, layout)
        limit = Settings().max_body_bytes
        self.idempotency = IdempotencyRecords(self.scripts, layout, pepper, max_body_bytes=limit)
