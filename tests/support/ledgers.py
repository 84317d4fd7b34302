"""The owners of svc's Redis data over one set of scripts, as the tests build them: what
``app.runtime.Services`` builds for the requests, without the rest of the services."""

from __future__ import annotations

from app.credits.idempotency import IdempotencyRecords
from app.credits.key_records import KeyRecords
from app.credits.money import Money
from app.credits.scripts import RedisClock, Scripts
from app.credits.throttle_counts import ThrottleCounts
from app.credits.usage_counts import UsageCounts
from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from app.kv.pipelined import PipelinedRedis


class Ledgers:
    """``money``, ``keys``, ``usage``, ``throttle`` and ``idempotency`` over one ``Scripts``."""

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
    ) -> None:
        self.redis = redis
        self.layout = layout
        self.scripts = Scripts(redis, script_calls)
        self.money = Money(
            self.scripts,
            layout,
            cap_ttl_s=cap_ttl_s,
            usage_ttl_s=usage_ttl_s,
            command_timeout_s=command_timeout_s,
            redis_clock=redis_clock,
        )
        self.keys = KeyRecords(self.scripts, layout)
        self.usage = UsageCounts(self.scripts, layout)
        self.throttle = ThrottleCounts(self.scripts, layout)
        self.idempotency = IdempotencyRecords(self.scripts)
