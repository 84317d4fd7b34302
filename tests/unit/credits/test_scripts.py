"""The Lua scripts, on fakeredis and on a real Valkey (the ``redis`` fixture runs both)."""

from __future__ import annotations

import time

import pytest

from app.core.clock import day_tag, iso_utc, utc_day
from app.core.errors import ApiError, ErrorKind
from app.credits.key_records import KeyUse
from app.credits.outcomes import Identity, ScriptStatus
from app.credits.sweeper import Sweeper
from app.keys.refusals import CAP_RESETS_HEADER
from app.kv.client import RedisClient
from app.kv.fields import (
    API_CHAT,
    GROUP_KEY,
    GROUP_MODEL,
    Served,
    UsageCounters,
    is_group_field,
)
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, pools, rec, reserve, snapshot

DAY = 86_400


async def _earned(ledger: Ledgers, pid: str, credits: int, now: float, gid: str = "g") -> None:
    status, _, _granted, _paid = await ledger.money.grant(
        pid, pool="earned", credits=credits, grant_id=gid, now=now, earned_ttl_s=30 * DAY
    )
    assert status is ScriptStatus.OK


# -- reserve -----------------------------------------------------------------------------


async def test_reserve_amount_and_earned_first_hold(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=100)
    await _earned(ledger, "acct_A", 60, clock())
    ident = await key(ledger, "acct_A", "k1")
    hold = await reserve(
        ledger, ident, "r1", clock(), prompt_units=1500, output_price=15, max_out=4000
    )
    assert hold.amount == 62  # ceil((1500 + 60000) / 1000) = 62
    assert hold.out_tokens == 4000
    assert hold.balance == 160 - 62
    assert await pools(ledger, "acct_A") == (0, 98)
    rsv = await ledger.redis.hgetall(ledger.layout.reservation(hold.shard, "r1"))
    assert (rsv[b"fe"], rsv[b"fp"], rsv[b"amount"]) == (b"60", b"2", b"62")
    assert (rsv[b"alias"], rsv[b"requested"], rsv[b"day"]) == (
        b"svc-fast",
        b"svc-auto",
        utc_day(clock()).encode(),
    )
    score = await ledger.redis.zscore(ledger.layout.reservations(hold.shard), "r1")
    assert score == int(clock()) + 60


async def test_minimum_hold_is_one_credit(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=5)
    ident = await key(ledger, "acct_A", "k1")
    hold = await reserve(ledger, ident, "r1", clock(), output_price=0, max_out=10)
    assert hold.amount == 1


@pytest.mark.parametrize(
    ("setup", "kind"),
    [
        ("revoked", ErrorKind.API_KEY_REVOKED),
        ("unknown", ErrorKind.INVALID_API_KEY),
        ("other_account", ErrorKind.INVALID_API_KEY),
        ("no_account", ErrorKind.INVALID_API_KEY),
        ("poor", ErrorKind.INSUFFICIENT_CREDITS),
    ],
)
async def test_refusals_change_nothing(
    ledger: Ledgers, clock: Clock, setup: str, kind: ErrorKind
) -> None:
    await account(ledger, "acct_A", purchased=5)
    await account(ledger, "acct_B", purchased=500)
    ident = await key(ledger, "acct_A", "k1")
    if setup == "revoked":
        assert (
            await ledger.keys.revoke_key(ident, rec(ident, cap=None, name="k"))
        ).status is ScriptStatus.OK
    elif setup == "unknown":
        ident = ident.__class__("acct_A", "nokey", "live", ident.shard)
    elif setup == "other_account":
        await key(ledger, "acct_B", "k2")
        ident = ident.__class__("acct_A", "k2", "live", ident.shard)
    elif setup == "no_account":
        await ledger.redis.delete(ledger.layout.account(ident.shard, "acct_A"))
    before = await snapshot(ledger)
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r1", clock(), max_out=10)
    assert info.value.kind is kind
    assert await snapshot(ledger) == before


async def test_a_resent_reserve_answers_its_own_reservation(ledger: Ledgers, clock: Clock) -> None:
    """redis-py sends a command again when its reply timed out: the second reserve of a rid
    holds nothing more and answers the first one's hold, even once the key is revoked."""
    await account(ledger, "acct_A", purchased=100)
    ident = await key(ledger, "acct_A", "k1")
    first = await reserve(ledger, ident, "r1", clock())
    await ledger.keys.revoke_key(ident, rec(ident, cap=None, name="k"))
    before = await snapshot(ledger)
    again = await reserve(ledger, ident, "r1", clock())
    assert (again.amount, again.out_tokens, again.balance) == (10, 10, 90)
    assert (first.amount, first.out_tokens) == (again.amount, again.out_tokens)
    assert await snapshot(ledger) == before


async def test_default_cap_is_lowered_to_what_the_balance_affords(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=7)
    ident = await key(ledger, "acct_A", "k1")
    hold = await reserve(
        ledger, ident, "r1", clock(), prompt_units=400, output_price=150, max_out=4096, min_out=16
    )
    assert hold.out_tokens == (7 * 1000 - 400) // 150 == 44
    assert hold.amount == 7
    assert hold.balance == 0


async def test_lowered_cap_below_the_minimum_is_402(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=2)
    ident = await key(ledger, "acct_A", "k1")
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r1", clock(), output_price=150, max_out=4096, min_out=16)
    assert info.value.kind is ErrorKind.INSUFFICIENT_CREDITS
    assert info.value.headers["x-should-retry"] == "false"


async def test_explicit_max_tokens_that_cannot_be_afforded_is_402(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=9)
    ident = await key(ledger, "acct_A", "k1")
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r1", clock(), max_out=10)  # min_out = max_out
    assert info.value.kind is ErrorKind.INSUFFICIENT_CREDITS
    assert await pools(ledger, "acct_A") == (0, 9)


# -- daily caps ----------------------------------------------------------------------------


async def test_daily_cap_counts_holds_and_refuses_past_it(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=1000)
    ident = await key(ledger, "acct_A", "k1", cap=25)
    r1 = await reserve(ledger, ident, "r1", clock(), max_out=10)
    r2 = await reserve(ledger, ident, "r2", clock(), max_out=10)
    cap_key = ledger.layout.cap(ident.shard, "k1", day_tag(utc_day(clock())))
    assert await ledger.redis.get(cap_key) == b"20"
    assert 0 < await ledger.redis.ttl(cap_key) <= 172_800
    with pytest.raises(ApiError) as info:  # the cap is taken by holds: come back soon
        await reserve(ledger, ident, "r3", clock(), max_out=10)
    assert info.value.kind is ErrorKind.DAILY_CAP_HELD
    assert info.value.headers["x-should-retry"] == "true"
    for hold in (r1, r2):  # spent in full: settled spend leaves 5, too few for r3
        await ledger.holds.settle(
            hold, now=clock(), credits_used=10, completion_tokens=10, outcome="completed"
        )
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r3", clock(), max_out=10)
    err = info.value
    assert err.kind is ErrorKind.DAILY_CAP_EXCEEDED
    assert err.status == 429
    assert err.headers["x-should-retry"] == "false"
    assert "retry-after" not in err.headers  # no client waits hours (issue 46)
    midnight = int(clock()) - int(clock()) % DAY + DAY
    assert err.headers[CAP_RESETS_HEADER] == iso_utc(midnight)
    # the default cap is lowered to a quarter of what the daily cap leaves (at least min_out)
    hold = await reserve(ledger, ident, "r4", clock(), max_out=4096, min_out=1)
    assert (hold.amount, hold.out_tokens) == (1, 1)
    hold = await reserve(ledger, ident, "r5", clock(), max_out=4096, min_out=3)
    assert (hold.amount, hold.out_tokens) == (3, 3)


async def test_holds_at_the_default_output_cap_do_not_starve_a_capped_key(
    ledger: Ledgers, clock: Clock
) -> None:
    """Issue 30, item 4: with a cap of 100 and no max_tokens, each hold used to take what
    the cap had left (the first 62, the second 38): 2 of 500 concurrent requests served.
    Now each takes at most a quarter of what is left, never below 16 output tokens."""
    await account(ledger, "acct_A", purchased=1_000_000)
    ident = await key(ledger, "acct_A", "k1", cap=100)
    holds, refused = [], []
    for n in range(500):  # all in flight at once: none settles
        try:
            holds.append(
                await reserve(
                    ledger,
                    ident,
                    f"r{n}",
                    clock(),
                    prompt_units=200,
                    output_price=15,
                    max_out=4096,
                    min_out=16,
                )
            )
        except ApiError as exc:
            refused.append(exc.kind)
    # nothing settled yet: the cap is only held, so the refusals say come back soon
    assert set(refused) == {ErrorKind.DAILY_CAP_HELD}
    assert len(holds) >= 15  # was 2
    assert sum(h.amount for h in holds) <= 100
    assert all(h.out_tokens >= 16 for h in holds)
    # a request that chose its output cap is held in full, or refused
    ident2 = await key(ledger, "acct_A", "k2", cap=100)
    hold = await reserve(ledger, ident2, "x1", clock(), output_price=15, max_out=4096)
    assert hold.out_tokens == 4096


async def test_cap_of_zero_refuses_everything(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=1000)
    ident = await key(ledger, "acct_A", "k1", cap=0)
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r1", clock(), output_price=0, max_out=1)
    assert info.value.kind is ErrorKind.DAILY_CAP_EXCEEDED


async def test_balance_short_and_cap_short_is_402(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=3)
    ident = await key(ledger, "acct_A", "k1", cap=2)
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r1", clock(), max_out=10)
    assert info.value.kind is ErrorKind.INSUFFICIENT_CREDITS


async def test_cap_starts_again_at_utc_midnight(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=1000)
    ident = await key(ledger, "acct_A", "k1", cap=10)
    await reserve(ledger, ident, "r1", clock(), max_out=10)
    with pytest.raises(ApiError):
        await reserve(ledger, ident, "r2", clock(), max_out=10)
    clock.advance(DAY - int(clock()) % DAY)  # exactly 00:00:00 UTC
    hold = await reserve(ledger, ident, "r2", clock(), max_out=10)
    assert hold.day == utc_day(clock())


async def test_test_keys_hold_against_the_cap_only(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=3)
    ident = await key(ledger, "acct_A", "k1", environment="test", cap=100)
    hold = await reserve(ledger, ident, "r1", clock(), max_out=50)
    assert (hold.amount, hold.balance) == (50, 3)
    assert await pools(ledger, "acct_A") == (0, 3)
    done = await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=40,
        prompt_tokens=1,
        completion_tokens=40,
        outcome="completed",
    )
    assert (done.credits_used, done.balance) == (40, 3)
    assert await pools(ledger, "acct_A") == (0, 3)
    usage = await ledger.redis.hgetall(ledger.layout.usage_total(ident.shard, "acct_A"))
    assert usage[b"test:credits"] == b"40"
    assert b"live:credits" not in usage
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r2", clock(), max_out=61)
    assert info.value.kind is ErrorKind.DAILY_CAP_EXCEEDED


# -- settle ------------------------------------------------------------------------------


async def _held(
    ledger: Ledgers, clock: Clock, earned: int, purchased: int, amount: int, api: str = API_CHAT
):  # type: ignore[no-untyped-def]
    await account(ledger, "acct_A", purchased=purchased)
    if earned:
        await _earned(ledger, "acct_A", earned, clock())
    ident = await key(ledger, "acct_A", "k1", cap=1000)
    return ident, await reserve(ledger, ident, "r1", clock(), max_out=amount, api=api)


@pytest.mark.parametrize(
    ("used", "after"),
    [(70, (0, 90)), (30, (30, 100)), (100, (0, 60)), (500, (0, 60)), (1, (59, 100))],
)
async def test_settle_spends_earned_first_and_refunds_each_pool(
    ledger: Ledgers, clock: Clock, used: int, after: tuple[int, int]
) -> None:
    ident, hold = await _held(ledger, clock, earned=60, purchased=100, amount=100)
    assert await pools(ledger, "acct_A") == (0, 60)
    done = await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=used,
        prompt_tokens=3,
        completion_tokens=9,
        outcome="completed",
    )
    charged = min(used, 100)
    assert done.status is ScriptStatus.OK
    assert done.credits_used == charged
    assert done.balance == 160 - charged
    assert await pools(ledger, "acct_A") == after
    cap_key = ledger.layout.cap(ident.shard, "k1", day_tag(hold.day))
    assert int(await ledger.redis.get(cap_key)) == charged


async def _usage_hashes(ledger: Ledgers, ident: Identity, day: str) -> list[dict[bytes, bytes]]:
    """The account's usage counters of ``day`` and of all time (not those per key and
    model the day's hash holds too: ``_group_counters``)."""
    layout = ledger.layout
    return [
        {
            k: v
            for k, v in (
                await ledger.redis.hgetall(layout.usage_day(ident.shard, ident.pid, day_tag(day)))
            ).items()
            if not is_group_field(k.decode())
        },
        await ledger.redis.hgetall(layout.usage_total(ident.shard, ident.pid)),
    ]


async def _group_counters(
    ledger: Ledgers, ident: Identity, day: str, group: str
) -> dict[str, UsageCounters]:
    return (await ledger.usage.usage_days_grouped(ident.pid, ident.environment, [day], group))[day]


async def test_settle_counts_an_api_other_than_chat_apart_as_well(
    ledger: Ledgers, clock: Clock
) -> None:
    """A Responses request counts in the environment's fields, as every request does, and in
    the API's own; its event names the API. A chat request after it adds to the first only."""
    ident, hold = await _held(ledger, clock, earned=0, purchased=100, amount=50, api="responses")
    chat = await reserve(ledger, ident, "r2", clock(), max_out=5)
    for held, (used, prompt, completion) in ((hold, (12, 30, 40)), (chat, (5, 1, 5))):
        await ledger.holds.settle(
            held,
            now=clock(),
            credits_used=used,
            prompt_tokens=prompt,
            completion_tokens=completion,
            outcome="completed",
        )
    for counters in await _usage_hashes(ledger, ident, hold.day):
        assert counters == {
            b"live:requests": b"2",
            b"live:prompt_tokens": b"31",
            b"live:completion_tokens": b"45",
            b"live:credits": b"17",
            b"live:responses:requests": b"1",
            b"live:responses:prompt_tokens": b"30",
            b"live:responses:completion_tokens": b"40",
            b"live:responses:credits": b"12",
        }
    events = await ledger.redis.xrange(ledger.layout.events(ident.shard))
    assert [e[1][b"api"] for e in events] == [b"responses", b"chat"]
    by_api = await ledger.usage.usage_days_by_api("acct_A", "live", [hold.day])
    assert by_api[hold.day] == {
        "chat": UsageCounters(1, 1, 5, 5),
        "responses": UsageCounters(1, 30, 40, 12),
        "messages": UsageCounters(),  # none came through the Messages API
    }
    # per key and per model served, whatever the API: both requests, one key, one model
    # (a group counts prompt and completion tokens as one)
    both = UsageCounters(requests=2, prompt_tokens=31 + 45, credits=17)
    assert await _group_counters(ledger, ident, hold.day, GROUP_KEY) == {"k1": both}
    assert await _group_counters(ledger, ident, hold.day, GROUP_MODEL) == {"svc-fast": both}


async def test_settle_records_usage_and_one_event(ledger: Ledgers, clock: Clock) -> None:
    ident, hold = await _held(ledger, clock, earned=0, purchased=100, amount=50)
    await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=12,
        prompt_tokens=30,
        completion_tokens=40,
        outcome="client_disconnect",
        served=Served(
            response_id="chatcmpl-svc-77",
            created=int(clock()) - 3,
            ttfb_ms=250,
            duration_ms=3_100,
            usage_source="upstream",
        ),
    )
    tag = day_tag(hold.day)
    for counters in await _usage_hashes(ledger, ident, hold.day):
        assert counters == {
            b"live:requests": b"1",
            b"live:prompt_tokens": b"30",
            b"live:completion_tokens": b"40",
            b"live:credits": b"12",
        }
    assert await ledger.redis.ttl(ledger.layout.usage_day(ident.shard, "acct_A", tag)) > 0
    events = await ledger.redis.xrange(ledger.layout.events(ident.shard))
    assert len(events) == 1
    fields = {k.decode(): v.decode() for k, v in events[0][1].items()}
    assert fields == {
        "rid": "r1",
        "acct": "acct_A",
        "kid": "k1",
        "env": "live",
        "alias": "svc-fast",
        "requested": "svc-auto",
        "day": hold.day,
        "prompt_tokens": "30",
        "completion_tokens": "40",
        "credits": "12",
        "earned": "0",
        "outcome": "client_disconnect",
        "ts": str(int(clock())),
        "api": "chat",
        "served": f"chatcmpl-svc-77 {int(clock()) - 3} 250 3100 upstream",
    }
    assert await _group_counters(ledger, ident, hold.day, GROUP_KEY) == {
        "k1": UsageCounters(requests=1, prompt_tokens=30 + 40, credits=12)
    }
    assert not await ledger.redis.exists(ledger.layout.reservation(ident.shard, "r1"))
    assert await ledger.redis.zcard(ledger.layout.reservations(ident.shard)) == 0


async def test_released_records_no_usage(ledger: Ledgers, clock: Clock) -> None:
    ident, hold = await _held(ledger, clock, earned=0, purchased=100, amount=50)
    done = await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=0,
        prompt_tokens=0,
        completion_tokens=0,
        outcome="released",
    )
    assert (done.credits_used, done.balance) == (0, 100)
    assert not await ledger.redis.exists(ledger.layout.usage_total(ident.shard, "acct_A"))
    assert await ledger.redis.xlen(ledger.layout.events(ident.shard)) == 0


async def test_second_settle_changes_nothing(ledger: Ledgers, clock: Clock) -> None:
    _, hold = await _held(ledger, clock, earned=0, purchased=100, amount=50)
    await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=10,
        prompt_tokens=1,
        completion_tokens=1,
        outcome="completed",
    )
    before = await snapshot(ledger)
    again = await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=40,
        prompt_tokens=1,
        completion_tokens=1,
        outcome="completed",
    )
    assert again.status is ScriptStatus.NOT_FOUND
    assert await snapshot(ledger) == before


async def test_earned_expiring_during_a_request_is_not_refunded(
    ledger: Ledgers, clock: Clock
) -> None:
    _, hold = await _held(ledger, clock, earned=60, purchased=100, amount=100)
    clock.advance(30 * DAY)  # the earned pool expires exactly now
    done = await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=30,
        prompt_tokens=1,
        completion_tokens=1,
        outcome="completed",
    )
    assert done.credits_used == 30
    assert await pools(ledger, "acct_A") == (0, 100)  # 30 of 60 earned used, 30 expired
    assert done.balance == 100


async def test_sweeper_guard_and_heartbeat(ledger: Ledgers, clock: Clock) -> None:
    ident, hold = await _held(ledger, clock, earned=0, purchased=100, amount=50)
    early = await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=0,
        prompt_tokens=0,
        completion_tokens=0,
        outcome="swept",
        only_if_expired=True,
    )
    assert early.status is ScriptStatus.NOT_EXPIRED
    assert (await ledger.holds.extend(hold, clock() + 600)).status is ScriptStatus.OK
    assert await ledger.redis.zscore(ledger.layout.reservations(ident.shard), "r1") == int(
        clock() + 600
    )
    clock.advance(120)
    assert await Sweeper(ledger.holds, interval_s=1).expired_holds(clock()) == []
    clock.advance(600)
    (expired,) = await Sweeper(ledger.holds, interval_s=1).expired_holds(clock())
    assert (expired.rid, expired.pid, expired.kid, expired.amount) == ("r1", "acct_A", "k1", 50)
    swept = await ledger.holds.settle(
        expired,
        now=clock(),
        credits_used=0,
        prompt_tokens=0,
        completion_tokens=0,
        outcome="swept",
        only_if_expired=True,
    )
    assert (swept.status, swept.balance) == (ScriptStatus.OK, 100)
    assert (await ledger.holds.extend(hold, clock() + 600)).status is ScriptStatus.NOT_FOUND


# -- grants and balances --------------------------------------------------------------------


async def test_earned_grants_roll_the_expiry(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A")
    await _earned(ledger, "acct_A", 5000, clock(), "v1")
    clock.advance(10 * DAY)
    status, balance, _granted, _paid = await ledger.money.grant(
        "acct_A", pool="earned", credits=5000, grant_id="v2", now=clock(), earned_ttl_s=30 * DAY
    )
    assert status is ScriptStatus.OK
    assert (balance.earned, balance.earned_exp) == (10_000, int(clock()) + 30 * DAY)
    clock.advance(30 * DAY - 1)
    _, before_expiry, _granted, _paid = await ledger.money.grant(
        "acct_A", pool="purchased", credits=1, grant_id="p1", now=clock()
    )
    assert before_expiry.earned == 10_000
    clock.advance(1)
    bal = await ledger.money.account_balance("acct_A", clock())
    assert bal is not None
    assert (bal.earned, bal.earned_exp, bal.purchased) == (0, 0, 1)


async def test_duplicate_grant_grants_nothing(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A")
    first = clock()
    _, _, granted, _paid = await ledger.money.grant(
        "acct_A", pool="purchased", credits=10, grant_id="g1", now=first
    )
    assert granted == int(first)
    clock.advance(60)
    status, balance, granted, _paid = await ledger.money.grant(
        "acct_A", pool="purchased", credits=10, grant_id="g1", now=clock()
    )
    assert status is ScriptStatus.DUPLICATE
    assert balance.purchased == 10
    assert granted == int(first)  # when it was granted, for an idempotent answer


async def test_daily_grant_limit_resets_at_midnight(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A")
    for i in range(5):
        status, _, _granted, _paid = await ledger.money.grant(
            "acct_A",
            pool="earned",
            credits=5000,
            grant_id=f"v{i}",
            now=clock(),
            earned_ttl_s=30 * DAY,
            daily_limit=5,
        )
        assert status is ScriptStatus.OK
    status, balance, _granted, _paid = await ledger.money.grant(
        "acct_A",
        pool="earned",
        credits=5000,
        grant_id="v5",
        now=clock(),
        earned_ttl_s=30 * DAY,
        daily_limit=5,
    )
    assert status is ScriptStatus.DAILY_LIMIT
    assert balance.earned == 25_000
    clock.advance(DAY - int(clock()) % DAY)
    status, balance, _granted, _paid = await ledger.money.grant(
        "acct_A",
        pool="earned",
        credits=5000,
        grant_id="v5",
        now=clock(),
        earned_ttl_s=30 * DAY,
        daily_limit=5,
    )
    assert (status, balance.earned) == (ScriptStatus.OK, 30_000)


async def test_grant_to_a_missing_account(ledger: Ledgers, clock: Clock) -> None:
    status, _, _granted, _paid = await ledger.money.grant(
        "acct_none", pool="purchased", credits=10, grant_id="g", now=clock()
    )
    assert status is ScriptStatus.ACCOUNT_MISSING


async def test_balance_reads_expiry_at_the_exact_second(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=7)
    ident = await key(ledger, "acct_A", "k1")
    await _earned(ledger, "acct_A", 40, clock())
    status, balance = await ledger.money.balance(ident, clock() + 30 * DAY - 1)
    assert (status, balance.earned, balance.purchased) == (ScriptStatus.OK, 40, 7)
    _, balance = await ledger.money.balance(ident, clock() + 30 * DAY)
    assert (balance.earned, balance.earned_exp, balance.total) == (0, 0, 7)
    await ledger.keys.revoke_key(ident, rec(ident, cap=None, name="k"))
    status, _ = await ledger.money.balance(ident, clock())
    assert status is ScriptStatus.KEY_REVOKED


# -- key records -----------------------------------------------------------------------------


async def test_key_records_are_never_overwritten(ledger: Ledgers) -> None:
    ident = await key(ledger, "acct_A", "k1", cap=5)
    assert (
        await ledger.keys.put_key(ident, rec(ident, status="active", cap=None, name="other"))
    ).status is ScriptStatus.DUPLICATE
    assert (
        await ledger.keys.revoke_key(ident, rec(ident, cap=5, name="k"))
    ).status is ScriptStatus.OK
    assert (
        await ledger.keys.revoke_key(ident, rec(ident, cap=5, name="k"))
    ).status is ScriptStatus.DUPLICATE
    assert (
        await ledger.keys.put_key(ident, rec(ident, status="active", cap=5, name="k"))
    ).status is ScriptStatus.DUPLICATE
    assert await ledger.keys.key_status(ident, time.time()) is ScriptStatus.KEY_REVOKED
    stranger = ident.__class__("acct_B", "k1", "live", ident.shard)
    assert (
        await ledger.keys.revoke_key(stranger, rec(stranger, cap=None, name="k"))
    ).status is ScriptStatus.KEY_UNKNOWN


async def test_revoking_a_lost_key_record_writes_it_revoked(ledger: Ledgers) -> None:
    ident = await key(ledger, "acct_A", "k1")
    await ledger.redis.delete(ledger.layout.api_key(ident.shard, "k1"))
    assert (
        await ledger.keys.revoke_key(ident, rec(ident, cap=None, name="k"))
    ).status is ScriptStatus.OK
    assert (
        await ledger.keys.put_key(ident, rec(ident, status="active", cap=None, name="k"))
    ).status is ScriptStatus.DUPLICATE
    assert await ledger.keys.key_status(ident, time.time()) is ScriptStatus.KEY_REVOKED


async def test_an_update_sets_name_and_cap_at_once_and_never_the_status(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1", cap=100)
    r1 = await reserve(ledger, ident, "r1", clock(), max_out=60)
    assert r1.amount == 60
    # the cap lowered below what the day has held: the next reserve is refused at once
    assert (
        await ledger.keys.update_key(ident, rec(ident, status="active", cap=50, name="renamed"))
    ).status is ScriptStatus.OK
    with pytest.raises(ApiError) as capped:  # held only: r1 may still use less than 50
        await reserve(ledger, ident, "r2", clock(), max_out=1)
    assert capped.value.kind is ErrorKind.DAILY_CAP_HELD
    await ledger.holds.settle(
        r1, now=clock(), credits_used=60, completion_tokens=60, outcome="completed"
    )
    with pytest.raises(ApiError) as capped:  # settled past it
        await reserve(ledger, ident, "r2", clock(), max_out=1)
    assert capped.value.kind is ErrorKind.DAILY_CAP_EXCEEDED
    record = await ledger.redis.hgetall(ledger.layout.api_key(ident.shard, "k1"))
    assert (record[b"cap"], record[b"name"], record[b"status"]) == (b"50", b"renamed", b"active")
    # raised, or removed: it serves again
    await ledger.keys.update_key(ident, rec(ident, status="active", cap=None, name="renamed"))
    assert (await reserve(ledger, ident, "r3", clock(), max_out=5)).amount == 5
    # an update racing a revocation does not undo it
    await ledger.keys.revoke_key(ident, rec(ident, cap=None, name="renamed"))
    await ledger.keys.update_key(ident, rec(ident, status="active", cap=10, name="late"))
    assert await ledger.keys.key_status(ident, time.time()) is ScriptStatus.KEY_REVOKED
    stranger = ident.__class__("acct_B", "k1", "live", ident.shard)
    assert (
        await ledger.keys.update_key(stranger, rec(stranger, status="active", cap=1, name="x"))
    ).status is ScriptStatus.KEY_UNKNOWN
    assert (await ledger.redis.hgetall(ledger.layout.api_key(ident.shard, "k1")))[
        b"name"
    ] == b"late"


async def test_updating_a_lost_key_record_writes_it_whole(ledger: Ledgers) -> None:
    ident = await key(ledger, "acct_A", "k1")
    await ledger.redis.delete(ledger.layout.api_key(ident.shard, "k1"))
    await ledger.keys.update_key(ident, rec(ident, status="revoked", cap=7, name="n"))
    record = await ledger.redis.hgetall(ledger.layout.api_key(ident.shard, "k1"))
    assert record == {
        b"acct": b"acct_A",
        b"status": b"revoked",
        b"env": b"live",
        b"cap": b"7",
        b"name": b"n",
        b"exp": b"0",
        b"models": b"*",
        b"rpm": b"0",
        b"mcr": b"0",
    }


async def test_scripts_survive_script_flush(
    real_redis: RedisClient, keyspace: object, clock: Clock
) -> None:
    ledger = Ledgers(real_redis, keyspace, cap_ttl_s=100, usage_ttl_s=100)  # type: ignore[arg-type]
    await account(ledger, "acct_A", purchased=100)
    ident = await key(ledger, "acct_A", "k1")
    await ledger.scripts.load()
    await real_redis.script_flush()
    hold = await reserve(ledger, ident, "r1", clock())
    await real_redis.script_flush()
    done = await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=4,
        prompt_tokens=1,
        completion_tokens=4,
        outcome="completed",
    )
    assert (done.status, done.balance) == (ScriptStatus.OK, 96)


# -- expiry events -----------------------------------------------------------------------


async def _expiries(ledger: Ledgers, pid: str) -> list[tuple[str, int]]:
    shard = ledger.layout.shard(pid)
    return [
        (fields[b"acct"].decode(), int(fields[b"credits"]))
        for _, fields in await ledger.redis.xrange(ledger.layout.events(shard))
        if fields.get(b"kind") == b"expire"
    ]


async def test_reserve_records_the_earned_credits_it_expires(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=100)
    await _earned(ledger, "acct_A", 60, clock())
    ident = await key(ledger, "acct_A", "k1")
    clock.advance(30 * DAY)
    await reserve(ledger, ident, "r1", clock(), max_out=10)
    assert await _expiries(ledger, "acct_A") == [("acct_A", 60)]
    assert await pools(ledger, "acct_A") == (0, 90)
    await reserve(ledger, ident, "r2", clock(), max_out=10)  # zeroed already: no event
    assert await _expiries(ledger, "acct_A") == [("acct_A", 60)]


async def test_a_test_key_leaves_an_expired_pool_alone(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=100)
    await _earned(ledger, "acct_A", 60, clock())
    ident = await key(ledger, "acct_A", "k1", environment="test")
    clock.advance(30 * DAY)
    await reserve(ledger, ident, "r1", clock(), max_out=10)
    assert await _expiries(ledger, "acct_A") == []
    assert await pools(ledger, "acct_A") == (60, 100)  # stored; the next live script expires it


async def test_grant_records_the_earned_credits_it_expires(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A")
    await _earned(ledger, "acct_A", 60, clock())
    clock.advance(31 * DAY)
    status, balance, _, _paid = await ledger.money.grant(
        "acct_A", pool="purchased", credits=5, grant_id="p1", now=clock()
    )
    assert (status, balance.earned, balance.purchased) == (ScriptStatus.OK, 0, 5)
    await _earned(ledger, "acct_A", 7, clock(), gid="g2")
    assert await _expiries(ledger, "acct_A") == [("acct_A", 60)]
    assert await pools(ledger, "acct_A") == (7, 5)


async def test_settle_lapses_held_earned_credits_of_an_expired_pool(
    ledger: Ledgers, clock: Clock
) -> None:
    ident, hold = await _held(ledger, clock, earned=60, purchased=100, amount=100)
    clock.advance(30 * DAY)
    await ledger.holds.settle(
        hold,
        now=clock(),
        credits_used=20,
        prompt_tokens=1,
        completion_tokens=1,
        outcome="completed",
    )
    # 20 used from the earned hold; its other 40 lapse (the pool held 0 besides)
    assert await _expiries(ledger, "acct_A") == [("acct_A", 40)]
    assert await pools(ledger, "acct_A") == (0, 100)
    usage = [f for _, f in await ledger.redis.xrange(ledger.layout.events(ident.shard))]
    assert [(f[b"credits"], f[b"earned"]) for f in usage if b"rid" in f] == [(b"20", b"20")]


async def test_settle_lapses_held_earned_credits_of_a_pool_zeroed_meanwhile(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=100)
    await _earned(ledger, "acct_A", 60, clock())
    ident = await key(ledger, "acct_A", "k1")
    first = await reserve(ledger, ident, "r1", clock(), max_out=50)  # 50 earned held
    clock.advance(30 * DAY)
    await reserve(ledger, ident, "r2", clock(), max_out=5)  # zeroes the 10 left
    await ledger.holds.settle(
        first, now=clock(), credits_used=0, prompt_tokens=0, completion_tokens=0, outcome="released"
    )
    assert await _expiries(ledger, "acct_A") == [("acct_A", 10), ("acct_A", 50)]
    assert await pools(ledger, "acct_A") == (0, 95)  # nothing earned came back to the pool


async def test_an_expired_key_is_refused_from_its_expiry_on_and_nothing_changes(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1")
    expires = int(clock()) + 60
    await ledger.keys.update_key(ident, rec(ident, expires_at=expires))
    assert (await reserve(ledger, ident, "r1", expires - 1, max_out=5)).amount == 5
    assert await ledger.keys.key_status(ident, expires - 1) is ScriptStatus.OK
    before = await snapshot(ledger)
    with pytest.raises(ApiError) as expired:
        await reserve(ledger, ident, "r2", expires, max_out=5)
    assert expired.value.kind is ErrorKind.API_KEY_EXPIRED
    assert await snapshot(ledger) == before
    assert await ledger.keys.key_status(ident, expires) is ScriptStatus.KEY_EXPIRED
    status, _ = await ledger.money.balance(ident, expires)
    assert status is ScriptStatus.KEY_EXPIRED
    # revoked outranks expired; lifting the expiry lets the key serve again
    await ledger.keys.update_key(ident, rec(ident, expires_at=None))
    assert (await reserve(ledger, ident, "r3", expires + 10, max_out=5)).amount == 5
    await ledger.keys.update_key(ident, rec(ident, expires_at=expires))
    await ledger.keys.revoke_key(ident, rec(ident))
    assert await ledger.keys.key_status(ident, expires) is ScriptStatus.KEY_REVOKED


async def test_a_reserve_records_the_keys_use_and_a_refusal_does_not(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1", cap=10)
    first = rec(ident)
    assert await ledger.keys.keys_use("acct_A", [first], clock()) == [KeyUse(None, 0)]
    await reserve(ledger, ident, "r1", clock(), max_out=10)
    held = (await ledger.keys.keys_use("acct_A", [first], clock()))[0]
    assert held.last_used == int(clock())
    assert held.today > 0  # the hold counts against the cap at once
    with pytest.raises(ApiError):  # over the cap: refused, not a use
        await reserve(ledger, ident, "r2", clock() + 5, max_out=10)
    # a successor shares its lineage's count; another key has none; tomorrow starts at 0
    successor = await key(ledger, "acct_A", "k2", lineage="k1")
    other = await key(ledger, "acct_A", "k3")
    uses = await ledger.keys.keys_use("acct_A", [first, rec(successor), rec(other)], clock())
    assert uses == [held, KeyUse(None, held.today), KeyUse(None, 0)]
    (next_day,) = await ledger.keys.keys_use("acct_A", [first], clock() + 86_400)
    assert next_day == KeyUse(held.last_used, 0)
