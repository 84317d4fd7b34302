"""Key secret → identity: cache, negative cache, argon2 cold path and its rate limit."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.accounts.accounts import Accounts
from app.accounts.api_keys import ApiKeys
from app.accounts.bodies import KeyCreateRequest
from app.core.errors import ApiError, ErrorKind, KeyRecordMissing, invalid_api_key
from app.credits.outcomes import Identity, ScriptStatus
from app.keys.auth import Authenticator
from app.keys.format import digest, generate_key
from app.keys.throttle import FailedAuthThrottle
from app.store import Store
from tests.conftest import Clock
from tests.support.ledgers import Ledgers

PEPPER = b"pepper"
ADDRESS = "192.0.2.1"


@pytest.fixture
def accounts(store: Store, ledger: Ledgers) -> Accounts:
    return Accounts(store, ledger.money)


@pytest.fixture
def api_keys(store: Store, ledger: Ledgers, accounts: Accounts) -> ApiKeys:
    return ApiKeys(store, ledger.keys, accounts, PEPPER)


def _auth(ledger: Ledgers, store: Store, clock: Clock, per_s: float = 5.0) -> Authenticator:
    return Authenticator(
        ledger.keys,
        ledger.throttle,
        store,
        PEPPER,
        negative_ttl_s=30,
        cold_per_s=per_s,
        clock=clock,
    )


async def test_hot_path_uses_cache_after_first_lookup(
    accounts: Accounts, api_keys: ApiKeys, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    pid = await accounts.create_account()
    created = await api_keys.create_key(
        pid, KeyCreateRequest(name="k", environment="live", daily_cap_credits=None)
    )
    auth = _auth(ledger, store, clock)
    ident = await auth.identify(f"Bearer {created.key}")
    assert (ident.pid, ident.environment) == (pid, "live")
    await ledger.redis.delete(ledger.layout.digest(digest(PEPPER, created.key)))
    assert await auth.identify(f"Bearer {created.key}") == ident  # served from the cache
    assert auth.cold_verifications == 0


async def test_cold_path_rewarms_redis(
    accounts: Accounts, api_keys: ApiKeys, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    pid = await accounts.create_account()
    created = await api_keys.create_key(
        pid, KeyCreateRequest(name="k", environment="test", daily_cap_credits=7)
    )
    key_digest = digest(PEPPER, created.key)
    await ledger.redis.delete(ledger.layout.digest(key_digest))
    auth = _auth(ledger, store, clock)
    ident = await auth.identify(f"Bearer {created.key}")
    assert ident.pid == pid
    assert auth.cold_verifications == 1
    assert await ledger.keys.lookup_digest(key_digest) == ident


async def test_cold_path_restores_a_lost_key_record_with_its_status(
    accounts: Accounts, api_keys: ApiKeys, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    pid = await accounts.create_account()
    created = await api_keys.create_key(
        pid, KeyCreateRequest(name="k", environment="live", daily_cap_credits=None)
    )
    kid = created.id.removeprefix("key_")
    await store.revoke_key(pid, kid, 1)
    await ledger.redis.flushall()
    await ledger.money.open_account(pid)
    auth = _auth(ledger, store, clock)
    with pytest.raises(ApiError) as info:
        await auth.authenticated(f"Bearer {created.key}", ADDRESS, auth.key_active)
    assert info.value.kind is ErrorKind.API_KEY_REVOKED


async def test_wrong_secret_with_a_real_key_id_is_refused_and_negative_cached(
    accounts: Accounts, api_keys: ApiKeys, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    pid = await accounts.create_account()
    created = await api_keys.create_key(
        pid, KeyCreateRequest(name="k", environment="live", daily_cap_credits=None)
    )
    forged = generate_key("live", kid=created.id.removeprefix("key_"))
    auth = _auth(ledger, store, clock)
    for _ in range(3):
        with pytest.raises(ApiError) as info:
            await auth.identify(f"Bearer {forged}")
        assert info.value.kind is ErrorKind.INVALID_API_KEY
    assert auth.cold_verifications == 1  # then the negative cache answers
    clock.advance(31)
    with pytest.raises(ApiError):
        await auth.identify(f"Bearer {forged}")
    assert auth.cold_verifications == 2


async def test_fake_keys_cost_no_argon2_and_cold_path_is_rate_limited(
    accounts: Accounts, api_keys: ApiKeys, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    auth = _auth(ledger, store, clock, per_s=2)
    for _ in range(50):  # unknown key ids: a database miss, never argon2
        with pytest.raises(ApiError):
            await auth.identify(f"Bearer {generate_key('live')}")
    assert auth.cold_verifications == 0
    pid = await accounts.create_account()
    created = await api_keys.create_key(
        pid, KeyCreateRequest(name="k", environment="live", daily_cap_credits=None)
    )
    kid = created.id.removeprefix("key_")
    kinds = []
    for _ in range(10):  # forged secrets for a real key id: argon2, bounded by the bucket
        with pytest.raises(ApiError) as info:
            await auth.identify(f"Bearer {generate_key('live', kid=kid)}")
        kinds.append(info.value.kind)
    assert auth.cold_verifications == 2
    assert kinds.count(ErrorKind.AUTH_RATE_LIMITED) == 8


async def test_an_addresss_cold_path_budget_is_shared_by_every_worker(
    accounts: Accounts, api_keys: ApiKeys, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    workers = [
        Authenticator(
            ledger.keys,
            ledger.throttle,
            store,
            PEPPER,
            cold_per_s=100,
            cold_per_address_s=3,
            clock=clock,
        )
        for _ in range(3)
    ]
    pid = await accounts.create_account()
    created = await api_keys.create_key(
        pid, KeyCreateRequest(name="k", environment="live", daily_cap_credits=None)
    )
    kid = created.id.removeprefix("key_")

    async def forged(auth: Authenticator, address: str) -> ErrorKind:
        with pytest.raises(ApiError) as info:
            await auth.authenticated(
                f"Bearer {generate_key('live', kid=kid)}", address, auth.key_active
            )
        return info.value.kind

    kinds = [await forged(workers[n % 3], ADDRESS) for n in range(9)]
    # three argon2 checks in the second for the address, wherever its requests landed
    assert kinds.count(ErrorKind.INVALID_API_KEY) == 3
    assert kinds.count(ErrorKind.AUTH_RATE_LIMITED) == 6
    assert sum(auth.cold_verifications for auth in workers) == 3
    assert await forged(workers[0], "192.0.2.77") is ErrorKind.INVALID_API_KEY  # another's


async def test_malformed_keys_never_reach_redis(
    ledger: Ledgers, store: Store, clock: Clock
) -> None:
    auth = _auth(ledger, store, clock)
    calls = 0
    original = ledger.keys.lookup_digest

    async def counting(d: str):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return await original(d)

    ledger.keys.lookup_digest = counting  # type: ignore[method-assign]
    for header in [None, "", "Bearer x", "Bearer svc_live_" + "A" * 50, "Token abc"]:
        with pytest.raises(ApiError):
            await auth.identify(header)
    assert calls == 0


async def test_a_burst_of_1000_fake_keys_costs_a_bounded_number_of_argon2_checks(
    accounts: Accounts, api_keys: ApiKeys, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    pid = await accounts.create_account()
    created = await api_keys.create_key(
        pid, KeyCreateRequest(name="k", environment="live", daily_cap_credits=None)
    )
    real_kid = created.id.removeprefix("key_")
    auth = _auth(ledger, store, clock, per_s=20)

    async def burst() -> list[ErrorKind]:
        # half made-up key ids, half forged secrets for a real key id: all well-formed
        fakes = [
            generate_key("live", kid=real_kid) if i % 2 else generate_key("live")
            for i in range(1000)
        ]
        outcomes: list[object] = []
        for i in range(0, len(fakes), 50):  # 50 at a time, as concurrent requests would
            outcomes += await asyncio.gather(
                *(auth.identify(f"Bearer {k}") for k in fakes[i : i + 50]), return_exceptions=True
            )
        assert [o for o in outcomes if not isinstance(o, ApiError)] == []
        return [o.kind for o in outcomes if isinstance(o, ApiError)]

    kinds = await burst()
    assert auth.cold_verifications <= 20  # the bucket's burst; the clock has not moved
    assert set(kinds) == {ErrorKind.INVALID_API_KEY, ErrorKind.AUTH_RATE_LIMITED}
    clock.advance(1.0)
    await burst()
    assert auth.cold_verifications <= 40  # 20 more per second, whatever the flood
    # the real key still works, and through the cache without any argon2
    ident = await auth.identify(f"Bearer {created.key}")
    assert ident.pid == pid


async def test_a_cached_key_whose_redis_record_was_lost_is_restored(
    accounts: Accounts, api_keys: ApiKeys, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    pid = await accounts.create_account()
    created = await api_keys.create_key(
        pid, KeyCreateRequest(name="k", environment="live", daily_cap_credits=5)
    )
    auth = _auth(ledger, store, clock)
    ident = await auth.authenticated(
        f"Bearer {created.key}", ADDRESS, auth.key_active
    )  # now cached in this worker
    await ledger.redis.flushall()  # Redis lost everything
    assert await auth.authenticated(f"Bearer {created.key}", ADDRESS, auth.key_active) == ident
    assert auth.cold_verifications == 1
    assert await ledger.keys.key_status(ident, time.time()) is ScriptStatus.OK  # the record is back
    assert await ledger.keys.lookup_digest(digest(PEPPER, created.key)) == ident


async def test_authenticated_restores_a_lost_record_once_and_counts_a_wrong_key_at_any_step(
    accounts: Accounts, api_keys: ApiKeys, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    pid = await accounts.create_account()
    created = await api_keys.create_key(
        pid, KeyCreateRequest(name="k", environment="live", daily_cap_credits=None)
    )
    throttle = FailedAuthThrottle(2, 60.0, ledger.throttle.count_failed_auth, clock=clock)
    auth = Authenticator(
        ledger.keys, ledger.throttle, store, PEPPER, throttle=throttle, clock=clock
    )
    uses: list[Identity] = []

    async def record_always_missing(ident: Identity) -> None:
        uses.append(ident)
        missing = invalid_api_key()
        raise KeyRecordMissing(missing.kind, missing.message)

    # The record is restored once and `use` tried once more; then the key is a 401 ...
    with pytest.raises(ApiError) as info:
        await auth.authenticated(f"Bearer {created.key}", ADDRESS, record_always_missing)
    assert info.value.kind is ErrorKind.INVALID_API_KEY
    assert len(uses) == 2
    assert auth.cold_verifications == 1
    # ... counted like a wrong key from `identify`: two failures and the address's next
    # wrong key is refused
    with pytest.raises(ApiError) as info:
        await auth.authenticated(f"Bearer {generate_key('live')}", ADDRESS, auth.key_active)
    assert info.value.kind is ErrorKind.INVALID_API_KEY
    with pytest.raises(ApiError) as info:
        await auth.authenticated(f"Bearer {generate_key('live')}", ADDRESS, auth.key_active)
    assert info.value.kind is ErrorKind.AUTH_RATE_LIMITED
    # a valid key from the same address is served (issue 30, item 7), as from any other
    ident = await auth.authenticated(f"Bearer {created.key}", ADDRESS, auth.key_active)
    assert ident.pid == pid
    ident = await auth.authenticated(f"Bearer {created.key}", "192.0.2.2", auth.key_active)
    assert ident.pid == pid
