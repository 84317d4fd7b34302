"""Opening chat completions: ``CompletionService.open`` reserves the credits a request may
use, then connects it to an upstream (``Completion.connect``: the alias's upstreams in
order, until one produces its first piece). A reserve Redis answered too late is released
in the background, so a caller that was told 503 holds nothing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable

from app.completion.completion import Completion
from app.completion.hold_calls import HoldCalls
from app.completion.observer import CompletionObservers
from app.completion.request import CompletionRequest
from app.completion.router import UpstreamRouter
from app.completion.settlement import in_background
from app.core.ids import random_id
from app.core.metrics import METRICS
from app.credits.ceilings import NO_CEILING
from app.credits.idempotency import IdempotencyClaim
from app.credits.outcomes import Identity, Refusal, Replay, ScriptStatus
from app.keys.auth import PresentedKey
from app.keys.refusals import refusal_error
from app.kv.client import REDIS_ERRORS, REDIS_TIMEOUT

MIN_OUTPUT_TOKENS = 16
# Releasing a reserve whose reply came too late: attempts 0.5, 1.5, 3.5 and 7.5 s after it.
RELEASE_ATTEMPTS = 4
RELEASE_FIRST_PAUSE_S = 0.5

log = logging.getLogger("svc.completions")


class CompletionService:
    """Opens completions: validates affordability, reserves, connects upstream."""

    def __init__(
        self,
        holds: HoldCalls,
        router: UpstreamRouter,
        *,
        deadline_s: int,
        recorded_bytes: int = 1 << 20,
        clock: Callable[[], float] = time.time,
        observers: CompletionObservers | None = None,
    ) -> None:
        """``recorded_bytes``: the largest stream an Idempotency-Key's record keeps;
        ``observers``: what watches its requests and their completions (traces on:
        ``app.completion.traced``), None for nothing."""
        self.holds = holds
        self.router = router
        self.deadline_s = deadline_s
        self.recorded_bytes = recorded_bytes
        self.clock = clock
        self.observers = observers

    async def open(
        self,
        ident: Identity,
        params: CompletionRequest,
        claim: IdempotencyClaim | None = None,
        *,
        ceiling: int = NO_CEILING,
    ) -> Completion | Replay:
        """Reserve credits and start the upstream stream, or raise the ``ApiError`` of the
        reserve's refusal (with ``claim``, an Idempotency-Key: the ``Replay`` of its
        request when that has finished; ``ceiling``: the request's ``svc-max-credits``)."""
        if self.observers is not None:
            self.observers.opening(ident, params)
        alias = params.alias
        max_out = params.max_tokens or alias.default_output_tokens
        min_out = max_out if params.max_tokens else min(MIN_OUTPUT_TOKENS, max_out)
        started = time.monotonic()
        now = self.clock()
        rid = random_id("rsv_", 16)
        try:
            reserved = await self.holds.reserve(
                ident,
                rid=rid,
                now=now,
                prompt_units=params.prompt_token_bound * alias.price.prompt_worst,
                output_price=alias.price.output,
                max_out=max_out,
                min_out=min_out,
                deadline=now + self.deadline_s,
                alias=alias.id,
                requested=params.requested,
                models=params.models,
                api=params.api,
                ceiling=ceiling,
                claim=claim,
            )
        except REDIS_TIMEOUT:
            # Redis was slow, not gone: the reserve may still run, and hold credits for
            # a caller that has answered 503, if its reply came just too late. Release it
            # by its id once Redis answers (nothing changes if it never held anything).
            in_background(self._release_unanswered(ident, rid, reserved_at=now))
            raise
        if isinstance(reserved, Refusal):
            raise refusal_error(reserved)
        if isinstance(reserved, Replay):
            return reserved
        hold = reserved
        METRICS.reserved(ident.environment, alias.id, hold.amount)
        seal = None if claim is None else claim.seal
        completion = Completion(self, ident, params, hold, started=started, seal=seal)
        try:
            await completion.connect()
        except BaseException:
            await completion.settle(outcome="released")
            raise
        return completion

    async def open_presented(
        self,
        key: PresentedKey,
        params: CompletionRequest,
        claim: IdempotencyClaim | None = None,
        *,
        ceiling: int = NO_CEILING,
    ) -> Completion | Replay:
        """``open`` for the request's key (``claim``: its Idempotency-Key's, made by
        ``IdempotencyRecords.claim_for``): tried again once with the key's record restored
        when Redis lost it (``PresentedKey.use``)."""
        return await key.use(
            functools.partial(self.open, params=params, claim=claim, ceiling=ceiling)
        )

    async def _release_unanswered(self, ident: Identity, rid: str, *, reserved_at: float) -> None:
        """Try a few times, further apart each time; past that (Redis still not answering)
        the sweeper refunds the reservation, if one was made, at its deadline."""
        pause_s = RELEASE_FIRST_PAUSE_S
        for _ in range(RELEASE_ATTEMPTS):
            await asyncio.sleep(pause_s)
            try:
                released = await self.holds.release_unanswered(
                    ident, rid, reserved_at=reserved_at, now=self.clock()
                )
            except REDIS_ERRORS:
                pause_s *= 2
                continue
            if released.status is ScriptStatus.OK:
                log.info("released a reservation whose reserve was answered too late")
            return
