"""Webhooks' rules: where a URL may point, secrets and signatures, the retry schedule, and
the outbox in both stores (fan-out, once per event, one sender per delivery)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
from collections.abc import AsyncIterator

import msgspec
import pytest

from app.core.errors import TargetRefused
from app.store import DeliveryRecord, Store, WebhookEventRecord, WebhookRecord
from app.webhooks.delivery import RETRY_WINDOW_S, body_of, next_attempt
from app.webhooks.events import event_id
from app.webhooks.signing import signature, webhook_secret
from app.webhooks.targets import NOBODY, AllowList, check_url, parse_url, public
from tests.support.databases import Database

T0 = 1_790_000_000


@pytest.mark.parametrize(
    ("address", "is_public"),
    [
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("10.0.0.1", False),
        ("172.16.5.4", False),
        ("192.168.1.1", False),
        ("127.0.0.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("::1", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("::ffff:10.0.0.1", False),
        ("::ffff:8.8.8.8", True),
    ],
)
def test_only_public_addresses_are_public(address: str, is_public: bool) -> None:
    assert public(ipaddress.ip_address(address)) is is_public


def test_the_allow_list_takes_names_addresses_and_networks() -> None:
    allow = AllowList.parse(" hooks.internal , 127.0.0.1, 10.20.0.0/16,")
    named = ["hooks.internal", "HOOKS.internal.", "127.0.0.1", "10.20.3.4", "10.21.0.1", "other"]
    assert [allow.names(host) for host in named] == [True, True, True, True, False, False]
    assert parse_url("http://127.0.0.1:9000/x", allow).port == 9000
    with pytest.raises(TargetRefused):
        parse_url("http://10.21.0.1/x", allow)


@pytest.mark.parametrize(
    "url",
    [
        "http://8.8.8.8/hook",
        "https://user@8.8.8.8/hook",
        "https:///nohost",
        "https://8.8.8.8:99999/hook",
        "https://8.8.8.8/" + "a" * 2048,
        "https://8.8.8.8/a b",
        "javascript:alert(1)",
    ],
)
def test_malformed_or_plain_urls_are_refused_before_any_lookup(url: str) -> None:
    with pytest.raises(TargetRefused):
        parse_url(url, NOBODY)


async def test_every_resolved_address_must_be_public() -> None:
    public_target = await check_url("https://8.8.8.8/hook", NOBODY)
    assert public_target.parts.hostname == "8.8.8.8"
    assert public_target.addresses == ("8.8.8.8",)
    with pytest.raises(TargetRefused, match="SVC_WEBHOOK_ALLOW_HOSTS"):
        await check_url("https://localhost/hook", NOBODY)  # resolves to loopback
    allowed = await check_url("http://localhost:8080/hook", AllowList.parse("localhost"))
    assert allowed.parts.port == 8080
    assert allowed.addresses == ()  # let through by name: any of its addresses


def test_the_secret_is_derived_and_the_signature_is_the_documented_one() -> None:
    secret = webhook_secret(b"pepper", "wh_1", "salt")
    assert secret == webhook_secret(b"pepper", "wh_1", "salt")
    assert secret.startswith("whsec_")
    assert len(secret) == 6 + 43
    assert secret != webhook_secret(b"pepper", "wh_1", "other")
    assert secret != webhook_secret(b"other", "wh_1", "salt")
    body = b'{"id":"evt_1"}'
    header = signature(secret, T0, body)
    expected = hmac.new(secret.encode(), f"{T0}.".encode() + body, hashlib.sha256).hexdigest()
    assert header == f"t={T0},v1={expected}"


def _delivery(**changes: object) -> DeliveryRecord:
    base = DeliveryRecord(
        event_id="evt_1",
        webhook_id="wh_1",
        account_pid="acct_A",
        type="key.revoked",
        created=T0,
        data='{"key_id":"key_x"}',
        status="pending",
        attempt=0,
        status_code=None,
        error=None,
        next_attempt_at=T0,
        lease_until=0,
        updated_at=T0,
    )
    return msgspec.structs.replace(base, **changes)


def test_retries_double_up_to_an_hour_within_a_day() -> None:
    delays = [next_attempt(_delivery(attempt=n), T0, 30.0) for n in range(1, 10)]
    assert [d - T0 for d in delays if d] == [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]
    late = T0 + RETRY_WINDOW_S - 100
    assert next_attempt(_delivery(attempt=3), late, 30.0) is None  # past the window
    assert msgspec.json.decode(body_of(_delivery())) == {
        "id": "evt_1",
        "type": "key.revoked",
        "created": T0,
        "data": {"key_id": "key_x"},
    }


def test_an_occurrence_has_one_event_id() -> None:
    assert event_id("key.revoked", "k1") == event_id("key.revoked", "k1")
    assert event_id("key.revoked", "k1") != event_id("key.revoked", "k2")
    assert event_id("key.revoked", "k1").startswith("evt_")


# -- the outbox in both stores ---------------------------------------------------------


@pytest.fixture
async def store(database: Database) -> AsyncIterator[Store]:
    from app.store import AccountRecord

    s = database.open()
    await s.migrate()
    for pid in ("acct_A", "acct_B"):
        await s.create_account(AccountRecord(pid=pid, created_at=1))
    yield s
    await s.close()


def _hook(n: int, events: str, pid: str = "acct_A") -> WebhookRecord:
    return WebhookRecord(
        id=f"wh_{n}",
        account_pid=pid,
        url=f"https://example.com/{n}",
        events=events,
        description="",
        secret_salt="salt",
        created_at=T0 + n,
    )


def _event(n: int, kind: str = "key.revoked", pid: str = "acct_A") -> WebhookEventRecord:
    return WebhookEventRecord(
        event_id=f"evt_{n}", account_pid=pid, type=kind, created=T0, data=f'{{"n":{n}}}'
    )


async def test_webhooks_are_limited_per_account(store: Store) -> None:
    assert await store.create_webhook(_hook(1, "key.revoked"), max_per_account=2)
    assert await store.create_webhook(_hook(2, "key.revoked"), max_per_account=2)
    assert not await store.create_webhook(_hook(3, "key.revoked"), max_per_account=2)
    assert await store.delete_webhook("acct_A", "wh_1", T0) is not None
    assert await store.create_webhook(_hook(3, "key.revoked"), max_per_account=2)
    assert [w.id for w in await store.list_webhooks("acct_A")] == ["wh_2", "wh_3"]
    assert await store.get_webhook("acct_B", "wh_2") is None  # another account's
    changed = await store.update_webhook("acct_A", "wh_2", {"events": "key.rotated"})
    assert changed == msgspec.structs.replace(_hook(2, "key.rotated"))


async def test_an_event_goes_once_to_each_webhook_that_takes_its_type(store: Store) -> None:
    await store.create_webhook(_hook(1, "key.revoked key.rotated"), max_per_account=10)
    await store.create_webhook(_hook(2, "key.rotated"), max_per_account=10)
    await store.create_webhook(_hook(3, "key.revoked", pid="acct_B"), max_per_account=10)
    events = [_event(1), _event(2, "key.rotated"), _event(3, pid="acct_B")]
    assert await store.add_webhook_events(events, T0) == 4
    assert await store.add_webhook_events(events, T0) == 0  # written again: nothing more
    due = await store.claim_deliveries(T0, T0 + 60, 50)
    assert sorted((d.delivery.webhook_id, d.delivery.event_id) for d in due) == [
        ("wh_1", "evt_1"),
        ("wh_1", "evt_2"),
        ("wh_2", "evt_2"),
        ("wh_3", "evt_3"),
    ]
    assert {d.url for d in due if d.delivery.webhook_id == "wh_2"} == {"https://example.com/2"}
    assert await store.claim_deliveries(T0, T0 + 60, 50) == []  # taken: nobody else sends


async def test_deliveries_are_claimed_once_among_concurrent_claimers(
    store: Store, database: Database
) -> None:
    await store.create_webhook(_hook(1, "key.revoked"), max_per_account=10)
    await store.add_webhook_events([_event(n) for n in range(30)], T0)
    others = [database.open() for _ in range(3)]
    try:
        rounds = await asyncio.gather(
            *(s.claim_deliveries(T0, T0 + 60, 50) for s in [store, *others])
        )
    finally:
        await asyncio.gather(*(s.close() for s in others))
    claimed = [d.delivery.event_id for taken in rounds for d in taken]
    assert sorted(claimed) == sorted(f"evt_{n}" for n in range(30))


async def test_a_recorded_attempt_sets_the_next_and_a_deleted_webhook_gets_nothing(
    store: Store,
) -> None:
    await store.create_webhook(_hook(1, "key.revoked"), max_per_account=10)
    await store.add_webhook_events([_event(1)], T0)
    (due,) = await store.claim_deliveries(T0, T0 + 60, 50)
    failed = msgspec.structs.replace(
        due.delivery, attempt=1, status_code=500, next_attempt_at=T0 + 30, lease_until=0
    )
    await store.record_delivery(failed)
    assert await store.claim_deliveries(T0 + 29, T0 + 90, 50) == []  # not due yet
    (again,) = await store.claim_deliveries(T0 + 30, T0 + 90, 50)
    assert (again.delivery.attempt, again.delivery.status_code) == (1, 500)
    (listed,) = await store.list_deliveries("wh_1", 10)
    assert listed.lease_until == T0 + 90
    await store.record_delivery(msgspec.structs.replace(failed, next_attempt_at=T0 + 60))
    await store.delete_webhook("acct_A", "wh_1", T0 + 40)
    assert await store.claim_deliveries(T0 + 100, T0 + 160, 50) == []


async def test_old_deliveries_are_pruned_in_batches(store: Store) -> None:
    await store.create_webhook(_hook(1, "key.revoked"), max_per_account=10)
    events = [msgspec.structs.replace(_event(n), created=T0 + n) for n in range(7)]
    await store.add_webhook_events(events, T0)
    assert await store.prune_deliveries(T0 + 5, 2) == 2
    assert await store.prune_deliveries(T0 + 5, 2) == 2
    assert await store.prune_deliveries(T0 + 5, 2) == 1
    assert await store.prune_deliveries(T0 + 5, 2) == 0
    assert sorted(d.event_id for d in await store.list_deliveries("wh_1", 10)) == [
        "evt_5",
        "evt_6",
    ]


def test_a_plain_http_url_is_told_the_setting_that_allows_it() -> None:
    with pytest.raises(TargetRefused, match=r"must be https.*SVC_WEBHOOK_ALLOW_HOSTS"):
        parse_url("http://127.0.0.1:9000/hook", NOBODY)
