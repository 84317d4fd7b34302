"""Issue 44, item 2: the keys a capped or rate-limited key creates share its daily cap and
its rate limit (its lineage), so a key capped at 100 credits a day cannot spend 600 through
keys it made "within its limits"; their rotations stay in that lineage. Over the real
creation path (``Accounts.create_key`` with the calling key as granter) and the reserve
and settle scripts, on fakeredis, a real Valkey and a real Valkey Cluster."""

from __future__ import annotations

import asyncio

import pytest

from app.accounts.accounts import Accounts
from app.accounts.answers import ApiKeyCreated
from app.accounts.api_keys import ApiKeys
from app.accounts.bodies import KeyCreateRequest
from app.core.clock import day_tag, utc_day
from app.credits.outcomes import Hold, Identity, Refusal, ScriptStatus
from app.keys.format import digest, kid_from_public_id
from app.store import KeyRecord, Store
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import reserved

PEPPER = b"p"
CAP = 100
CHILDREN = 5  # with the creator: six keys, each capped at 100


def _request(name: str, cap: int | None, **fields: object) -> KeyCreateRequest:
    return KeyCreateRequest(name=name, environment="live", daily_cap_credits=cap, **fields)  # type: ignore[arg-type]


async def _ident(ledger: Ledgers, made: ApiKeyCreated) -> Identity:
    """The identity the hot path gets for a key's secret."""
    ident = await ledger.keys.lookup_digest(digest(PEPPER, made.key))
    assert ident is not None
    return ident


async def _record(api_keys: ApiKeys, pid: str, made: ApiKeyCreated) -> KeyRecord:
    kid = kid_from_public_id(made.id)
    assert kid is not None
    return await api_keys.caller(pid, kid)


async def _setup(store: Store, ledger: Ledgers, clock: Clock) -> tuple[ApiKeys, str]:
    accounts = Accounts(store, ledger.money, clock=clock)
    api_keys = ApiKeys(store, ledger.keys, accounts, PEPPER, max_active_keys=20, clock=clock)
    pid = await accounts.create_account()
    await accounts.grant_purchased(pid, 100_000)
    return api_keys, pid


CAP_REFUSALS = frozenset({ScriptStatus.DAILY_CAP_EXCEEDED})
"""How the cap refuses a request when no other hold is in flight: until midnight."""
CAP_REFUSALS_IN_FLIGHT = CAP_REFUSALS | {ScriptStatus.DAILY_CAP_HELD}
"""... and while the lineage's other requests still hold: retry soon, or until midnight."""


async def _spend(
    ledger: Ledgers,
    ident: Identity,
    rid: str,
    now: float,
    refusals: frozenset[ScriptStatus] = CAP_REFUSALS,
) -> int:
    """One 10-credit request, settled in full: the credits it spent (0: refused by the cap)."""
    hold = await reserved(ledger, ident, rid, now, max_out=10)
    if isinstance(hold, Refusal):
        assert hold.status in refusals, hold
        return 0
    assert isinstance(hold, Hold)
    settled = await ledger.holds.settle(
        hold, now=now, credits_used=hold.amount, completion_tokens=10, outcome="completed"
    )
    return settled.credits_used


async def test_keys_made_by_a_capped_key_spend_its_cap_together_at_most(
    store: Store, ledger: Ledgers, clock: Clock
) -> None:
    api_keys, pid = await _setup(store, ledger, clock)
    creator = await api_keys.create_key(pid, _request("ops", CAP, role="admin"))
    granter = await _record(api_keys, pid, creator)
    children = [
        await api_keys.create_key(pid, _request(f"app {n}", CAP), granter=granter)
        for n in range(CHILDREN)
    ]
    idents = [await _ident(ledger, made) for made in (creator, *children)]
    # every key spends as fast as it can, all at once
    now = clock()
    spent = await asyncio.gather(
        *(
            _spend(ledger, ident, f"r-{ident.kid}-{n}", now, CAP_REFUSALS_IN_FLIGHT)
            for ident in idents
            for n in range(4)
        )
    )
    assert 0 < sum(spent) <= CAP
    # then one after the other until each is refused: the six keys spent 100 in all
    for ident in idents:
        n = 0
        while spent_now := await _spend(ledger, ident, f"s-{ident.kid}-{n}", now):
            spent.append(spent_now)
            n += 1
    assert sum(spent) == CAP
    counter = ledger.layout.cap(idents[0].shard, granter.kid, day_tag(utc_day(now)))
    assert int(await ledger.redis.get(counter) or 0) == CAP
    # the key list shows each key's lineage's count: the cap they share
    listed = await api_keys.list_keys(pid)
    assert {item.name: item.used_today_credits for item in listed.data} == {
        "ops": CAP,
        **{f"app {n}": CAP for n in range(CHILDREN)},
    }


async def test_a_child_s_rotation_and_its_own_children_stay_in_the_lineage(
    store: Store, ledger: Ledgers, clock: Clock
) -> None:
    api_keys, pid = await _setup(store, ledger, clock)
    creator = await api_keys.create_key(pid, _request("ops", CAP, role="admin"))
    granter = await _record(api_keys, pid, creator)
    child = await api_keys.create_key(pid, _request("app", 50, role="admin"), granter=granter)
    rotated = await api_keys.rotate_key(pid, child.id, 0, granter=granter)
    grandchild = await api_keys.create_key(
        pid, _request("app's app", 10), granter=await _record(api_keys, pid, rotated)
    )
    for made in (child, rotated, grandchild):
        assert (await _ident(ledger, made)).cap_kid == granter.kid
        assert (await _record(api_keys, pid, made)).cap_kid == granter.kid


@pytest.mark.parametrize(
    ("creator_cap", "creator_rpm", "shared"),
    [(CAP, None, True), (None, 60, True), (None, None, False)],
    ids=["capped", "rate-limited", "unlimited"],
)
async def test_only_a_capped_or_rate_limited_creator_shares_its_lineage(
    store: Store,
    ledger: Ledgers,
    clock: Clock,
    creator_cap: int | None,
    creator_rpm: int | None,
    shared: bool,
) -> None:
    api_keys, pid = await _setup(store, ledger, clock)
    creator = await api_keys.create_key(
        pid, _request("ops", creator_cap, role="admin", rate_limit_rpm=creator_rpm)
    )
    granter = await _record(api_keys, pid, creator)
    child = await api_keys.create_key(
        pid, _request("app", 10, rate_limit_rpm=creator_rpm), granter=granter
    )
    kid = kid_from_public_id(child.id)
    assert (await _ident(ledger, child)).cap_kid == (granter.kid if shared else kid)
    # an operator's keys always start a lineage of their own
    operator_made = await api_keys.create_key(pid, _request("op", CAP))
    assert (await _ident(ledger, operator_made)).cap_kid == kid_from_public_id(operator_made.id)


async def test_keys_made_by_a_rate_limited_key_share_its_rate_limit(
    store: Store, ledger: Ledgers, clock: Clock
) -> None:
    api_keys, pid = await _setup(store, ledger, clock)
    creator = await api_keys.create_key(pid, _request("ops", None, role="admin", rate_limit_rpm=3))
    granter = await _record(api_keys, pid, creator)
    children = [
        await api_keys.create_key(
            pid, _request(f"app {n}", None, rate_limit_rpm=3), granter=granter
        )
        for n in range(3)
    ]
    idents = [await _ident(ledger, made) for made in (creator, *children)]
    now, started, refused = clock(), 0, 0
    for n in range(4):
        for ident in idents:
            held = await reserved(ledger, ident, f"r-{ident.kid}-{n}", now, max_out=1)
            if isinstance(held, Refusal):
                assert held.status is ScriptStatus.RATE_LIMITED, held
                refused += 1
            else:
                started += 1
    assert (started, refused) == (3, 13)  # three starts a minute for the four keys together
