"""Time's events on every Redis flavour and a SQLite store: keys and earned pools about
to expire are told once, and an expired pool is zeroed, recorded and told through the
flusher, once, whoever meets the expiry first."""

from __future__ import annotations

import msgspec

from app.core.clock import DAY_S
from app.kv.client import RedisClient
from app.store import AccountRecord, KeyRecord, Store, WebhookRecord
from app.usage.flusher import Flusher
from app.webhooks.events import EARNED_EXPIRED, EARNED_EXPIRING, KEY_EXPIRING
from app.webhooks.registry import Webhooks
from app.webhooks.scanner import Scanner, earned_expiring, expiring_keys
from app.webhooks.targets import NOBODY
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, reserve

ALL = f"{KEY_EXPIRING} {EARNED_EXPIRING} {EARNED_EXPIRED}"


def _key(kid: str, expires_at: int | None, status: str = "active") -> KeyRecord:
    return KeyRecord(
        kid=kid,
        account_pid="acct_W",
        name=kid,
        environment="live",
        daily_cap_credits=None,
        secret_hash="h",
        last4="abcd",
        created_at=0,
        status=status,
        expires_at=expires_at,
    )


def test_which_keys_and_pools_are_about_to_expire() -> None:
    now = 1_790_000_000
    keys = [
        _key("soon", now + 6 * DAY_S),
        _key("edge", now + 7 * DAY_S),
        _key("later", now + 7 * DAY_S + 1),
        _key("never", None),
        _key("gone", now),
        _key("revoked", now + DAY_S, status="revoked"),
    ]
    told = expiring_keys("acct_W", keys, now)
    assert [msgspec.json.decode(e.data)["key_id"] for e in told] == ["key_soon", "key_edge"]
    assert expiring_keys("acct_W", keys, now + 1)[0].event_id == told[0].event_id  # seen again
    assert earned_expiring("acct_W", 50, now + 3 * DAY_S, now)[0].type == EARNED_EXPIRING
    assert earned_expiring("acct_W", 50, now + 3 * DAY_S + 1, now) == []
    assert earned_expiring("acct_W", 0, now + DAY_S, now) == []


async def _scanner(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock
) -> tuple[Scanner, Flusher]:
    await store.create_account(AccountRecord(pid="acct_W", created_at=0))
    hook = WebhookRecord(
        id="wh_1",
        account_pid="acct_W",
        url="https://example.com/h",
        events=ALL,
        description="",
        secret_salt="s",
        created_at=0,
    )
    await store.create_webhook(hook, max_per_account=10)
    webhooks = Webhooks(store, ledger.money, b"pepper", NOBODY, clock)
    scanner = Scanner(store, ledger.money, webhooks, redis, ledger.layout, clock=clock)
    return scanner, Flusher(redis, ledger.layout, store, clock=clock)


async def _told(store: Store) -> list[str]:
    return sorted(d.type for d in await store.list_deliveries("wh_1", 100))


async def test_an_idle_pool_is_told_before_and_after_it_expires_once_each(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    scanner, flusher = await _scanner(redis, ledger, store, clock)
    await account(ledger, "acct_W", purchased=10)
    granted = await ledger.money.grant(
        "acct_W", pool="earned", credits=500, grant_id="g1", now=clock(), earned_ttl_s=5 * DAY_S
    )
    assert granted.balance.earned == 500
    assert await scanner.scan() == 0  # 5 days ahead: not yet
    clock.advance(2 * DAY_S + 1)
    assert await scanner.scan() == 1
    assert await scanner.scan() == 0  # seen again: nothing more
    clock.advance(3 * DAY_S)  # past the expiry, and nothing touched the account
    await scanner.scan()
    assert await ledger.money.earned_pool("acct_W") == (0, 0)  # zeroed, and recorded
    await flusher.flush_all()
    await scanner.scan()
    await flusher.flush_all()
    assert await _told(store) == [EARNED_EXPIRED, EARNED_EXPIRING]
    (expired,) = [d for d in await store.list_deliveries("wh_1", 10) if d.type == EARNED_EXPIRED]
    assert msgspec.json.decode(expired.data)["credits"] == 500
    clock.advance(26 * DAY_S)  # kept SVC_ACTIVITY_DAYS (30) after the event
    assert await scanner.prune() == 0
    clock.advance(5 * DAY_S)
    assert await scanner.prune() == 2
    assert await store.list_deliveries("wh_1", 10) == []


async def test_an_expiry_a_request_meets_first_is_told_the_same_way(
    redis: RedisClient, ledger: Ledgers, store: Store, clock: Clock
) -> None:
    scanner, flusher = await _scanner(redis, ledger, store, clock)
    await account(ledger, "acct_W", purchased=100)
    await ledger.money.grant(
        "acct_W", pool="earned", credits=70, grant_id="g1", now=clock(), earned_ttl_s=DAY_S
    )
    ident = await key(ledger, "acct_W", "kidW00000000")
    clock.advance(DAY_S)
    await reserve(ledger, ident, "r1", clock())  # the reserve zeroes the expired pool
    await scanner.scan()  # finds nothing left to zero
    await flusher.flush_all()
    await flusher.flush_all()
    assert await _told(store) == [EARNED_EXPIRED]
