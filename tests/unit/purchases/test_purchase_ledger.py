"""Stripe's events on the purchase ledger (issue 45 item 3), below HTTP: one purchase per
session however its events arrive, refunds by cumulative share, disputes taken and given
back, events before their purchase kept, unmatched purchases kept for operators, Redis
failures repaired once; and a property test: any order and duplication of one purchase's
events ends at the same balance and ledger. On fakeredis, the real Valkey and the Cluster,
each over SQLite and PostgreSQL (the property test: SQLite)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.exceptions import ConnectionError as RedisConnectionError

from app.accounts.accounts import Accounts
from app.accounts.ledger import Ledger
from app.core.errors import ApiError, ErrorKind
from app.kv.client import RedisClient
from app.kv.layout import KeySpace
from app.ops.reconcile import reconcile
from app.purchases.events import PaymentEvent
from app.purchases.listing import PurchaseFilter, purchase_list
from app.purchases.purchases import Purchases
from app.purchases.stripe_events import payment_event
from app.store import Store, open_store
from app.usage.reader import UsageReader
from tests.conftest import Clock
from tests.support import stripe_signing as stripe
from tests.support.databases import Database
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import key, reserve

DAY = 86_400


class Shop:
    def __init__(self, redis: RedisClient, store: Store) -> None:
        self.redis, self.store = redis, store
        self.layout = KeySpace("svc", 8)
        self.clock = Clock()
        self.ledgers = Ledgers(redis, self.layout, cap_ttl_s=2 * DAY, usage_ttl_s=40 * DAY)
        self.ledger = Ledger(store, self.ledgers.money, clock=self.clock)
        self.accounts = Accounts(store, self.ledgers.money, ledger=self.ledger, clock=self.clock)
        self.purchases = Purchases(store, self.ledger, self.accounts, self.clock)

    async def send(self, body: bytes) -> str:
        return await self.purchases.apply("stripe", payment_event(body))

    async def balance(self, pid: str) -> tuple[int, int]:
        got = await self.accounts.balance(pid)
        return got.total_available, got.debt

    async def entries(self, pid: str) -> list[tuple[str, int, int]]:
        return sorted((e.kind, e.credits, e.debt_change) for e in await self.store.list_grants(pid))

    async def drift(self) -> int:
        report = await reconcile(
            self.redis,
            self.layout,
            self.store,
            now=self.clock(),
            earned_ttl_s=30 * DAY,
            usage_retention_s=40 * DAY,
        )
        return report.accounts_with_drift + report.pending_entries


async def _shop(redis: RedisClient, path: Path, database: Database | None = None) -> Shop:
    store = database.open() if database else open_store(f"sqlite:///{path / 'svc.db'}")
    await store.migrate()
    shop = Shop(redis, store)
    await UsageReader(shop.ledgers.usage, store, retention_s=40 * DAY).epoch()
    return shop


@pytest.fixture
async def shop(redis: RedisClient, tmp_path: Path, database: Database) -> AsyncIterator[Shop]:
    """On SQLite and PostgreSQL (the ``database`` fixture's)."""
    made = await _shop(redis, tmp_path, database)
    yield made
    await made.store.close()


def _paid(pid: str, **kw: Any) -> bytes:
    return stripe.checkout_session(account=pid, credits="1000", amount_total=1000, **kw)


async def test_a_paid_session_grants_once_however_its_events_come(shop: Shop) -> None:
    pid = await shop.accounts.create_account()
    completed = _paid(pid, event_id="evt_1")
    succeeded = _paid(pid, event_type="checkout.session.async_payment_succeeded", event_id="evt_2")
    gate = asyncio.Semaphore(8)

    async def send(body: bytes) -> str:
        async with gate:
            return await shop.send(body)

    results = await asyncio.gather(*(send(completed) for _ in range(30)), send(succeeded))
    assert results.count("applied") == 1
    assert set(results) == {"applied", "duplicate"}
    assert await shop.balance(pid) == (1000, 0)
    assert await shop.entries(pid) == [("purchase", 1000, 0)]
    assert await shop.drift() == 0


async def test_partial_refunds_take_their_cumulative_share_in_any_order(shop: Shop) -> None:
    pid = await shop.accounts.create_account()
    await shop.send(stripe.checkout_session(account=pid, credits="999", amount_total=1000))
    third = stripe.charge_refunded(amount=1000, amount_refunded=333)
    two_thirds = stripe.charge_refunded(amount=1000, amount_refunded=667)
    for body in (two_thirds, third, two_thirds, third):  # reordered and repeated
        await shop.send(body)
    assert await shop.balance(pid) == (999 - 666, 0)  # floor(999 × 667 / 1000)
    assert await shop.send(stripe.charge_refunded(amount=1000, amount_refunded=1000)) == "applied"
    assert await shop.balance(pid) == (0, 0)
    assert await shop.drift() == 0


async def test_a_refund_of_spent_credits_is_debt_and_the_next_purchase_pays_it(
    shop: Shop,
) -> None:
    pid = await shop.accounts.create_account()
    ident = await key(shop.ledgers, pid, "k1")
    await shop.send(_paid(pid))
    hold = await reserve(shop.ledgers, ident, "rsv1", shop.clock(), max_out=700)
    await shop.ledgers.holds.settle(
        hold, now=shop.clock(), credits_used=700, completion_tokens=700, outcome="completed"
    )
    await shop.send(stripe.charge_refunded(amount=1000, amount_refunded=1000))
    assert await shop.balance(pid) == (0, 700)
    with pytest.raises(ApiError) as refused:
        await reserve(shop.ledgers, ident, "rsv2", shop.clock())
    assert refused.value.kind is ErrorKind.ACCOUNT_IN_DEBT
    second = stripe.checkout_session(
        account=pid, credits="1000", session_id="cs_test_b", payment_intent="pi_test_2"
    )
    await shop.send(second)
    assert await shop.balance(pid) == (300, 0)  # the debt first, the rest spendable
    await reserve(shop.ledgers, ident, "rsv3", shop.clock(), max_out=300)
    assert await shop.entries(pid) == [
        ("purchase", 300, -700),
        ("purchase", 1000, 0),
        ("refund", -300, 700),
    ]


async def test_a_dispute_holds_the_rest_back_until_it_is_won(shop: Shop) -> None:
    pid = await shop.accounts.create_account()
    await shop.send(_paid(pid))
    await shop.send(stripe.charge_refunded(amount=1000, amount_refunded=250))
    await shop.send(stripe.dispute())
    assert await shop.balance(pid) == (0, 0)
    won = stripe.dispute("charge.dispute.closed", status="won")
    assert [await shop.send(won) for _ in range(2)] == ["applied", "duplicate"]
    assert await shop.balance(pid) == (750, 0)
    lost_other = stripe.dispute("charge.dispute.closed", dispute_id="du_test_2", status="lost")
    assert await shop.send(lost_other) == "ignored"
    assert await shop.drift() == 0


async def test_events_before_their_purchase_are_kept_and_applied_with_it(shop: Shop) -> None:
    pid = await shop.accounts.create_account()
    assert await shop.send(stripe.dispute("charge.dispute.closed", status="won")) == "kept"
    assert await shop.send(stripe.charge_refunded(amount=1000, amount_refunded=500)) == "kept"
    assert await shop.send(stripe.dispute()) == "kept"
    await shop.send(_paid(pid))
    # the refund took 500, the dispute the other 500, its win gave them back
    assert await shop.balance(pid) == (500, 0)
    assert await shop.store.kept_events("stripe", "pi_test_1") == []
    assert await shop.drift() == 0


async def test_an_unknown_account_or_no_credits_is_kept_unmatched(shop: Shop) -> None:
    pid = await shop.accounts.create_account()
    unknown = stripe.checkout_session(account="someone-else", session_id="cs_test_u1")
    uncounted = stripe.checkout_session(account=pid, credits=None, session_id="cs_test_u2")
    assert [await shop.send(b) for b in (unknown, uncounted, unknown)] == [
        "unmatched",
        "unmatched",
        "duplicate",
    ]
    assert await shop.balance(pid) == (0, 0)
    listed = await purchase_list(shop.store, PurchaseFilter(status="unmatched"))
    assert sorted(p.reference for p in listed.data) == ["cs_test_u1", "cs_test_u2"]


async def test_an_external_id_names_the_account(shop: Shop) -> None:
    pid = await shop.accounts.create_account(external_id="user-42")
    await shop.send(stripe.checkout_session(account="user-42", credits="77"))
    assert await shop.balance(pid) == (77, 0)


async def test_a_reader_may_name_the_account_itself(shop: Shop) -> None:
    """A store's reader that resolved the account (an app account token's) names its pid:
    used instead of the client reference, which a store purchase does not carry."""
    pid = await shop.accounts.create_account()
    event = PaymentEvent(
        kind="paid", event_id="n1", event_type="ONE_TIME_CHARGE", session_id="t1",
        account_pid=pid, credits=400,
    )  # fmt: skip
    assert await shop.purchases.apply("apple", event) == "applied"
    assert await shop.purchases.apply("apple", event) == "duplicate"
    assert await shop.balance(pid) == (400, 0)
    assert await shop.drift() == 0


async def test_redis_down_is_a_503_and_the_retry_applies_it_once(
    shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = await shop.accounts.create_account()
    money = shop.ledgers.money
    real = money.grant
    calls = {"n": 0}

    async def failing(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RedisConnectionError("down")
        return await real(*args, **kwargs)

    monkeypatch.setattr(money, "grant", failing)
    with pytest.raises(ApiError) as down:
        await shop.send(_paid(pid))
    assert down.value.kind is ErrorKind.SERVICE_UNAVAILABLE
    assert await shop.balance(pid) == (0, 0)
    assert await shop.send(_paid(pid)) == "applied"  # Stripe's retry
    assert await shop.send(_paid(pid)) == "duplicate"
    assert await shop.ledger.repair_pending(older_than_s=0) == 0
    assert await shop.balance(pid) == (1000, 0)
    assert await shop.drift() == 0


def _one_purchase(n: int) -> list[bytes]:
    """One purchase's six events, its ids unique to ``n`` (Redis outlives an example)."""
    ids = {"session_id": f"cs_test_p{n}", "payment_intent": f"pi_test_p{n}"}
    pi = ids["payment_intent"]
    return [
        stripe.checkout_session(account=f"user-{n}", credits="1000", **ids),
        stripe.checkout_session(
            "checkout.session.async_payment_succeeded", account=f"user-{n}", credits="1000", **ids
        ),
        stripe.charge_refunded(amount=1000, amount_refunded=300, payment_intent=pi),
        stripe.charge_refunded(amount=1000, amount_refunded=600, payment_intent=pi),
        stripe.dispute(dispute_id=f"du_test_p{n}", payment_intent=pi),
        stripe.dispute(
            "charge.dispute.closed", dispute_id=f"du_test_p{n}", payment_intent=pi, status="won"
        ),
    ]


_examples = iter(range(1_000_000))


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    order=st.permutations(range(6)),
    repeats=st.lists(st.integers(min_value=0, max_value=5), max_size=4),
)
async def test_any_order_and_duplication_ends_at_the_same_balance(
    redis: RedisClient,
    tmp_path_factory: pytest.TempPathFactory,
    order: list[int],
    repeats: list[int],
) -> None:
    """Refunded 600 of 1,000: 400 left, the dispute won giving back whatever it held, in
    any order of the six events, each maybe twice; the ledger's entries ask the same."""
    n = next(_examples)
    events = _one_purchase(n)
    await redis.flushall()  # each example on an empty Redis and a new store
    shop = await _shop(redis, tmp_path_factory.mktemp("shop"))
    try:
        pid = await shop.accounts.create_account(external_id=f"user-{n}")
        for i in [*order, *repeats]:
            await shop.send(events[i])
        assert await shop.balance(pid) == (400, 0)
        entries = await shop.entries(pid)
        assert sum(credits - debt for _, credits, debt in entries) == 400
        assert [k for k, _, _ in entries].count("purchase") == 1
        assert await shop.store.kept_events("stripe", f"pi_test_p{n}") == []
        assert await shop.drift() == 0
    finally:
        await shop.store.close()
