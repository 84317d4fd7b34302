"""A request's hold on its account's credits, from reserve to settle: one call into a Lua
script (``scripts``) per movement, made with the key names of ``KeySpace`` and answered with
the typed results of ``outcomes``. Reserve, settle and extend run per request (the hot
path); each is given up, by Redis's own clock, once its caller has stopped waiting for the
reply. The sweeper finds the holds it settles itself."""

from __future__ import annotations

from typing import Any

from app.core.clock import day_tag, utc_day
from app.credits import idempotency
from app.credits.ceilings import NO_CEILING
from app.credits.idempotency import IdempotencyClaim, RecordedResponse
from app.credits.outcomes import (
    NO_RATES,
    NO_TOKENS,
    Hold,
    Identity,
    OpenReservations,
    Rates,
    Refusal,
    Replay,
    ScriptStatus,
    Settlement,
    Tokens,
    Written,
)
from app.credits.script_args import ScriptArgs
from app.credits.scripts import RedisClock, Scripts
from app.kv.client import REDIS_TIMEOUT
from app.kv.fields import API_CHAT, NOTHING_SERVED, Served
from app.kv.layout import KeySpace

RESERVE = ScriptArgs(
    "reserve",
    "now",
    "rid",
    "pid",
    "kid",
    "prompt_units",
    "output_price",
    "max_out",
    "min_out",
    "deadline",
    "cap_ttl",
    "alias",
    "requested",
    "day",
    "now_ms",
    "models",
    "give_up_ms",
    "api",
    "ceiling",
    "fingerprint",
    "idem_ttl",
)
SETTLE = ScriptArgs(
    "settle",
    "now",
    "rid",
    "input_price",
    "prompt_tokens",
    "completion_tokens",
    "outcome",
    "only_if_expired",
    "usage_ttl",
    "served",
    "give_up_ms",
    "cached_price",
    "cache_write_price",
    "output_price",
    "cached_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "failovers",
    "record",
    "parts*3",
)
EXTEND = ScriptArgs(
    "extend", "rid", "deadline", replies={1: ScriptStatus.OK, 0: ScriptStatus.NOT_FOUND}
)
REPLY_MARGIN = 0.1  # the part of the Redis timeout a reserve's reply may take to come back
_HELD = (ScriptStatus.OK, ScriptStatus.DUPLICATE)


class Holds:
    """The holds of one set of connections (``scripts``: the requests' or the background
    tasks'): reserve, extend, settle; the accounts' pools are ``money.Money``'s."""

    def __init__(
        self,
        scripts: Scripts,
        layout: KeySpace,
        *,
        cap_ttl_s: int,
        usage_ttl_s: int,
        command_timeout_s: float | None = None,
        redis_clock: RedisClock | None = None,
    ) -> None:
        """``command_timeout_s``: how long the client waits for Redis's reply (its socket
        timeout); a reserve or settle that Redis runs later than that changes nothing. None:
        no limit (the background tasks: nobody waits on them)."""
        self.scripts = scripts
        self.redis = scripts.redis
        self.layout = layout
        self._cap_ttl = cap_ttl_s
        self._usage_ttl = usage_ttl_s
        self._command_timeout_s = command_timeout_s
        self.redis_clock = redis_clock or RedisClock()
        self._run = scripts.run

    async def sync_clock(self) -> float:
        """Measure how far Redis's clock is from this host's (a reserve's give-up time is
        compared with Redis's TIME); returns the offset in seconds. Called at start-up and
        by the sweeper's rounds, so a drifting clock is followed."""
        return await self.redis_clock.sync(self.redis)

    def _give_up_ms(self) -> int:
        """Redis's TIME, in ms, after which a reserve holds nothing: this worker waits
        ``command_timeout_s`` for the reply, and the last ``REPLY_MARGIN`` of that is kept
        for the reply's way back. A reserve run just before its caller's deadline would
        otherwise hold credits for a caller whose reply came too late (a resumed Redis
        answers a backlog of commands, and every reply waits for the ones before it)."""
        if self._command_timeout_s is None:
            return 0
        waits = self._command_timeout_s * (1 - REPLY_MARGIN)
        return int((self.redis_clock.now() + waits) * 1000)

    async def reserve(
        self,
        ident: Identity,
        *,
        rid: str,
        now: float,
        prompt_units: int,
        output_price: int,
        max_out: int,
        min_out: int,
        deadline: float,
        alias: str,
        requested: str,
        models: str,
        api: str = API_CHAT,
        ceiling: int = NO_CEILING,
        claim: IdempotencyClaim | None = None,
    ) -> Hold | Refusal | Replay:
        """Hold credits for one request, or the script's ``Refusal`` (``models``: the
        aliases the key must allow, space-separated; ``ceiling``: the most the request may
        hold, its ``svc-max-credits``, beside its key's own). With ``claim`` (an Idempotency-Key),
        a ``Replay`` when the key's request has finished already.

        Safe to send again (redis-py retries a command whose reply timed out): a reserve of
        a rid that is held already answers that reservation."""
        day = utc_day(now)
        shard = ident.shard
        cap_key = self.layout.cap(shard, ident.cap_kid, day_tag(day))
        keys = [
            self.layout.account(shard, ident.pid),
            self.layout.api_key(shard, ident.kid),
            cap_key,
            self.layout.reservation(shard, rid),
            self.layout.reservations(shard),
            self.layout.events(shard),
            self.layout.rate(shard, ident.cap_kid),
            self.layout.cap_held(cap_key),
        ]
        idempotent: dict[str, Any] = {}
        if claim is not None:
            keys.append(claim.record)
            idempotent = {"fingerprint": claim.fingerprint, "idem_ttl": idempotency.TTL_S}
        args = RESERVE(
            now=int(now),
            rid=rid,
            pid=ident.pid,
            kid=ident.kid,
            prompt_units=prompt_units,
            output_price=output_price,
            max_out=max_out,
            min_out=min_out,
            deadline=int(deadline),
            cap_ttl=self._cap_ttl,
            alias=alias,
            requested=requested,
            day=day,
            now_ms=round(now * 1000),
            models=models,
            give_up_ms=self._give_up_ms(),
            api=api,
            ceiling=ceiling,
            **idempotent,
        )
        status, amount, out_tokens, balance, *replayed = await self._run("reserve", keys, args)
        if status == ScriptStatus.REPLAY and claim is not None:
            opened = claim.seal.open_stream_or_none(bytes(replayed[0]))
            if opened is not None:
                return Replay(opened)
            status = ScriptStatus.UNRECORDED  # a record that does not open is none
        if status not in _HELD or not amount:
            # a ceiling's refusal names the ceiling where a hold has its output cap
            ceiling = int(out_tokens) if status == ScriptStatus.CEILING_TOO_LOW else 0
            return Refusal(ScriptStatus(status), int(balance), now, requested, alias, ceiling)
        return Hold(
            rid=rid,
            shard=shard,
            pid=ident.pid,
            kid=ident.kid,
            day=day,
            amount=int(amount),
            out_tokens=int(out_tokens),
            balance=int(balance),
            environment=ident.environment,
            cap_key=cap_key,
            idempotency=None if claim is None else claim.record,
        )

    async def settle(
        self,
        hold: Hold,
        *,
        now: float,
        rates: Rates,
        tokens: Tokens,
        outcome: str,
        only_if_expired: bool = False,
        served: Served = NOTHING_SERVED,
        failovers: int = 0,
        response: RecordedResponse | None = None,
    ) -> Settlement:
        """Close a reservation at its actual cost; a second call changes nothing. settle.lua
        works the cost out from ``tokens`` at ``rates`` (nothing for released and swept),
        never more than the hold: the reply's ``credits_used``. ``served``: what its
        activity row tells; ``failovers``: the upstreams the request failed over from
        before one served (its row's too). For a request with an Idempotency-Key,
        ``response`` is what its record keeps (None: not kept).

        Like ``reserve``, a settle that Redis runs after this worker stopped waiting for it
        changes nothing (``GAVE_UP``): its stream told the client nothing was charged, and
        the sweeper refunds the hold at its deadline. The sweeper's own calls
        (``only_if_expired``) have no such limit: nobody waits on them."""
        shard, tag = hold.shard, day_tag(hold.day)
        keys = [
            self.layout.reservation(shard, hold.rid),
            self.layout.reservations(shard),
            self.layout.account(shard, hold.pid),
            hold.cap_key,
            self.layout.usage_day(shard, hold.pid, tag),
            self.layout.usage_total(shard, hold.pid),
            self.layout.events(shard),
            self.layout.cap_held(hold.cap_key),
        ]
        recorded: dict[str, Any] = {}
        if hold.idempotency is not None:
            keys.append(hold.idempotency)
            parts = response.parts if response is not None else None
            recorded = (
                {"record": "unrecorded"} if parts is None else {"record": "body", "parts": parts}
            )
        args = SETTLE(
            now=int(now),
            rid=hold.rid,
            input_price=rates.input,
            prompt_tokens=tokens.prompt,
            completion_tokens=tokens.completion,
            outcome=outcome,
            only_if_expired=1 if only_if_expired else 0,
            usage_ttl=self._usage_ttl,
            served=served.text(),
            give_up_ms=0 if only_if_expired else self._give_up_ms(),
            cached_price=rates.cached_input,
            cache_write_price=rates.cache_write,
            output_price=rates.output,
            cached_tokens=tokens.cached,
            cache_write_tokens=tokens.cache_writes,
            reasoning_tokens=tokens.reasoning,
            failovers=failovers,
            **recorded,
        )
        status, used, balance = await self._run("settle", keys, args)
        if status == ScriptStatus.GAVE_UP:
            # the reply came within the timeout, but the script ran past the give-up time:
            # to the caller this is the timeout it guards against (nothing was charged)
            raise REDIS_TIMEOUT("settle reached Redis after its caller's give-up time")
        return Settlement(ScriptStatus(status), int(used), int(balance))

    async def release_unanswered(
        self, ident: Identity, rid: str, *, reserved_at: float, now: float
    ) -> Settlement:
        """Release, unused, the reservation a reserve whose reply never came may have made
        after all; ``NOT_FOUND`` when it never ran or held nothing (``reserved_at``: the
        ``now`` that reserve was sent with, which names its day)."""
        hold = Hold(
            rid=rid,
            shard=ident.shard,
            pid=ident.pid,
            kid=ident.kid,
            day=utc_day(reserved_at),
            amount=0,
            out_tokens=0,
            balance=0,
            environment=ident.environment,
            cap_key=self.layout.cap(ident.shard, ident.cap_kid, day_tag(utc_day(reserved_at))),
        )
        return await self.settle(
            hold, now=now, rates=NO_RATES, tokens=NO_TOKENS, outcome="released"
        )

    async def extend(self, hold: Hold, deadline: float) -> Written:
        """Move the reservation's deadline forward while its stream is alive (NOT_FOUND: it
        was settled or swept meanwhile)."""
        extended = await self._run(
            "extend",
            [self.layout.reservation(hold.shard, hold.rid), self.layout.reservations(hold.shard)],
            EXTEND(rid=hold.rid, deadline=int(deadline)),
        )
        return Written(EXTEND.replies[int(extended)])

    async def open_reservations(self, now: float) -> OpenReservations:
        """The reservations open over every shard, and those whose deadline is before ``now``
        (in whole seconds, as the scripts write deadlines): one pipelined round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in self.layout.all_shards():
            reservations = self.layout.reservations(shard)
            pipe.zcard(reservations)
            pipe.zcount(reservations, "-inf", f"({int(now)}")  # deadline before now
        replies = [int(n) for n in await pipe.execute()]
        return OpenReservations(open=sum(replies[0::2]), past_deadline=sum(replies[1::2]))
