"""App Store purchases on the ledger (issue 47 item 2), below HTTP, with transactions and
notifications signed by a throwaway CA with Apple's OIDs: one purchase per transaction
whoever sends it and however often (the app and the notification at once included),
credited to its token's account only; every bad transaction a 400 naming the field with
nothing written; refunds taken back (debt when spent), reversed and refunded again; each
notification once; the consumption data sent to a stand-in App Store Server API. The money
rules and reconcile clean after each. On fakeredis, the real Valkey and the Cluster, over
SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from app.core.errors import ApiError, ErrorKind
from app.kv.client import RedisClient
from app.purchases.account_token import AccountTokens
from app.purchases.apple_config import AppleApiKey, AppleConfig
from app.purchases.apple_store import AppleStore
from tests.support import apple_signing as apple
from tests.support.apple_api import StandIn, app_store_api
from tests.support.databases import Database
from tests.support.scripts_helpers import key, reserve
from tests.unit.purchases.test_purchase_ledger import Shop, _shop

PRODUCTS = {"credits.small": 1000, "credits.large": 5000}
CA = apple.AppleCA()


class AppleShop:
    def __init__(self, shop: Shop, api: StandIn | None) -> None:
        self.shop = shop
        self.tokens = AccountTokens(shop.store, b"p", shop.clock)
        api_key = None
        if api is not None:
            api_key = AppleApiKey("KEY123", "issuer-1", apple.private_key_pem(), api.url)
        config = AppleConfig(
            bundle_id=apple.BUNDLE_ID,
            app_id=None,
            environment="Sandbox",
            products=PRODUCTS,
            root_certs=(CA.root_der(),),
            consumption_consent=api is not None,
            api=api_key,
        )
        self.store = AppleStore(
            config, shop.purchases, self.tokens, shop.accounts, shop.store, shop.clock
        )

    async def account(self) -> tuple[str, str]:
        pid = await self.shop.accounts.create_account()
        return pid, (await self.tokens.issue(pid)).app_account_token

    async def send(self, pid: str, signed: str) -> Any:
        body = msgspec.json.encode({"signed_transaction": signed})
        return await self.store.record(pid, body)

    async def notify(self, signed_payload: str) -> tuple[str, str]:
        return await self.store.notify(msgspec.json.encode({"signedPayload": signed_payload}))


@pytest.fixture
def api() -> Iterator[StandIn]:
    with app_store_api() as stand_in:
        yield stand_in


@pytest.fixture
async def apple_shop(
    redis: RedisClient, tmp_path: Path, database: Database, api: StandIn
) -> AsyncIterator[AppleShop]:
    shop = await _shop(redis, tmp_path, database)
    yield AppleShop(shop, api)
    await shop.store.close()


def _tx(token: str | None, **kw: Any) -> tuple[str, str]:
    tx_id = apple.transaction_id()
    return tx_id, CA.sign(apple.transaction(token, transaction_id=tx_id, **kw))


async def test_sent_twice_while_its_notification_arrives_it_is_credited_once(
    apple_shop: AppleShop,
) -> None:
    pid, token = await apple_shop.account()
    tx_id, signed = _tx(token)
    charge = apple.notification(CA, "ONE_TIME_CHARGE", signed)
    answers = await asyncio.gather(
        apple_shop.send(pid, signed), apple_shop.send(pid, signed), apple_shop.notify(charge)
    )
    sent = [answers[0].result, answers[1].result, answers[2][1]]
    assert sent.count("applied") == 1, sent
    assert answers[0].id == answers[1].id == f"apple:{tx_id}"
    assert (answers[0].credits, answers[0].status) == (1000, "granted")
    assert await apple_shop.shop.balance(pid) == (1000, 0)
    assert await apple_shop.shop.entries(pid) == [("purchase", 1000, 0)]
    assert await apple_shop.notify(charge) == ("paid", "duplicate")  # its UUID, seen
    assert (await apple_shop.send(pid, signed)).result == "duplicate"
    purchase = await apple_shop.shop.store.get_purchase(f"apple:{tx_id}")
    assert purchase is not None
    assert (purchase.amount, purchase.currency, purchase.payment) == (990, "USD", tx_id)
    assert await apple_shop.shop.drift() == 0


async def test_another_accounts_transaction_is_refused_and_credited_to_its_own(
    apple_shop: AppleShop,
) -> None:
    buyer, token = await apple_shop.account()
    other, _ = await apple_shop.account()
    _, signed = _tx(token, product_id="credits.large")
    with pytest.raises(ApiError) as refused:
        await apple_shop.send(other, signed)
    assert refused.value.kind is ErrorKind.ACCOUNT_TOKEN_MISMATCH
    assert refused.value.param == "signed_transaction.appAccountToken"
    assert (await apple_shop.send(buyer, signed)).credits == 5000
    assert await apple_shop.shop.balance(other) == (0, 0)
    assert await apple_shop.shop.balance(buyer) == (5000, 0)
    assert await apple_shop.shop.drift() == 0


@pytest.mark.parametrize(
    ("change", "kind", "says"),
    [
        ({"bundle_id": "com.example.other"}, ErrorKind.INVALID_APPLE_SIGNATURE, "another app"),
        ({"environment": "Production"}, ErrorKind.INVALID_APPLE_SIGNATURE, "environment"),
        ({"product_id": "credits.huge"}, ErrorKind.INVALID_VALUE, "not one of"),
        ({"product_type": "Non-Consumable"}, ErrorKind.INVALID_VALUE, "consumable"),
        ({"revoked": True}, ErrorKind.INVALID_VALUE, "revoked"),
        ({"token": None}, ErrorKind.ACCOUNT_TOKEN_MISMATCH, "app account token"),
    ],
)
async def test_a_bad_transaction_is_a_400_naming_the_field_with_nothing_written(
    apple_shop: AppleShop, change: dict[str, Any], kind: ErrorKind, says: str
) -> None:
    pid, token = await apple_shop.account()
    fields = {"token": token, **change}  # the parameters are shared by every backend's run
    tx_id, signed = _tx(**fields)
    with pytest.raises(ApiError) as refused:
        await apple_shop.send(pid, signed)
    assert refused.value.kind is kind
    assert refused.value.param is not None
    assert refused.value.param.startswith("signed_transaction")
    assert says in refused.value.message
    assert await apple_shop.shop.store.get_purchase(f"apple:{tx_id}") is None
    assert await apple_shop.shop.entries(pid) == []


@pytest.mark.parametrize("chain", ["another root", "expired", "forged"])
async def test_a_transaction_not_signed_by_the_trusted_chain_is_refused(
    apple_shop: AppleShop, chain: str
) -> None:
    pid, token = await apple_shop.account()
    tx_id = apple.transaction_id()
    payload = apple.transaction(token, transaction_id=tx_id)
    if chain == "forged":  # a payload changed after it was signed
        head, _, sig = CA.sign(payload).split(".")
        other = CA.sign({**payload, "productId": "credits.large"}).split(".")[1]
        signed = f"{head}.{other}.{sig}"
    else:  # a chain to a root svc does not trust; the trusted chain, its leaf expired
        signed = (apple.AppleCA("Rogue") if chain == "another root" else CA.expired()).sign(payload)
    with pytest.raises(ApiError) as refused:
        await apple_shop.send(pid, signed)
    assert refused.value.kind is ErrorKind.INVALID_APPLE_SIGNATURE
    assert refused.value.param == "signed_transaction"
    assert await apple_shop.shop.store.get_purchase(f"apple:{tx_id}") is None
    with pytest.raises(ApiError):
        await apple_shop.notify(apple.notification(CA, "ONE_TIME_CHARGE", signed))
    assert await apple_shop.shop.entries(pid) == []


async def test_a_refund_after_spending_is_debt_reversed_and_refunded_again(
    apple_shop: AppleShop,
) -> None:
    shop = apple_shop.shop
    pid, token = await apple_shop.account()
    ident = await key(shop.ledgers, pid, "k1")
    _, signed = _tx(token)
    await apple_shop.send(pid, signed)
    hold = await reserve(shop.ledgers, ident, "rsv1", shop.clock(), max_out=700)
    await shop.ledgers.holds.settle(
        hold, now=shop.clock(), credits_used=700, completion_tokens=700, outcome="completed"
    )
    refund = apple.notification(CA, "REFUND", signed)
    assert await apple_shop.notify(refund) == ("refunded", "applied")
    assert await apple_shop.notify(refund) == ("refunded", "duplicate")
    assert await shop.balance(pid) == (0, 700)
    with pytest.raises(ApiError) as in_debt:
        await reserve(shop.ledgers, ident, "rsv2", shop.clock())
    assert in_debt.value.kind is ErrorKind.ACCOUNT_IN_DEBT
    reversed_ = apple.notification(CA, "REFUND_REVERSED", signed)
    assert await apple_shop.notify(reversed_) == ("refund_reversed", "applied")
    assert await shop.balance(pid) == (300, 0)  # the debt paid first
    # refunded again (a new notification), reversed again: each a new entry
    assert await apple_shop.notify(apple.notification(CA, "REFUND", signed))
    assert await shop.balance(pid) == (0, 700)
    assert await apple_shop.notify(apple.notification(CA, "REFUND_REVERSED", signed))
    assert await shop.balance(pid) == (300, 0)
    # an entry says what it did to the pools, and to the debt
    twice = [("refund", -300, 700), ("refund_reversed", 300, -700)] * 2
    assert await shop.entries(pid) == sorted([("purchase", 1000, 0), *twice])
    assert await shop.drift() == 0


async def test_a_refund_before_its_purchase_is_kept_and_applied_with_it(
    apple_shop: AppleShop,
) -> None:
    pid, token = await apple_shop.account()
    tx_id, signed = _tx(token)
    assert await apple_shop.notify(apple.notification(CA, "REFUND", signed)) == (
        "refunded",
        "kept",
    )
    assert (await apple_shop.send(pid, signed)).result == "applied"
    assert await apple_shop.shop.balance(pid) == (0, 0)
    assert await apple_shop.shop.drift() == 0
    del tx_id


async def test_a_charge_for_a_token_svc_never_served_is_kept_unmatched(
    apple_shop: AppleShop,
) -> None:
    _, signed = _tx("5e1ab5b4-3c2d-8e4f-9a0b-1c2d3e4f5a6b")
    assert await apple_shop.notify(apple.notification(CA, "ONE_TIME_CHARGE", signed)) == (
        "paid",
        "unmatched",
    )


async def test_test_and_other_notifications_are_200_and_change_nothing(
    apple_shop: AppleShop,
) -> None:
    assert await apple_shop.notify(apple.notification(CA, "TEST")) == ("ignored", "ignored")
    _, signed = _tx(None, product_type="Auto-Renewable Subscription", product_id="sub")
    assert await apple_shop.notify(apple.notification(CA, "DID_RENEW", signed)) == (
        "ignored",
        "ignored",
    )
    assert await apple_shop.notify(apple.notification(CA, "REFUND", signed)) == (
        "refunded",
        "ignored",
    )


async def test_a_consumption_request_sends_the_spent_share(
    apple_shop: AppleShop, api: StandIn
) -> None:
    shop = apple_shop.shop
    pid, token = await apple_shop.account()
    ident = await key(shop.ledgers, pid, "k1")
    tx_id, signed = _tx(token, product_id="credits.large")
    await apple_shop.send(pid, signed)
    hold = await reserve(shop.ledgers, ident, "rsv1", shop.clock(), max_out=1250)
    await shop.ledgers.holds.settle(
        hold, now=shop.clock(), credits_used=1250, completion_tokens=1000, outcome="completed"
    )
    asked = apple.notification(CA, "CONSUMPTION_REQUEST", signed, consumptionRequestReason="OTHER")
    assert await apple_shop.notify(asked) == ("consumption_request", "applied")
    (sent,) = api.received
    assert (sent.method, sent.path) == ("PUT", f"/inApps/v2/transactions/consumption/{tx_id}")
    header, claims = sent.bearer_claims()
    assert (header["alg"], header["kid"]) == ("ES256", "KEY123")
    assert (claims["iss"], claims["bid"], claims["aud"]) == (
        "issuer-1",
        apple.BUNDLE_ID,
        "appstoreconnect-v1",
    )
    assert sent.json() == {
        "customerConsented": True,
        "sampleContentProvided": False,
        "deliveryStatus": "DELIVERED",
        "consumptionPercentage": 25_000,  # 1,250 of 5,000 credits
    }
    assert await apple_shop.notify(asked) == ("consumption_request", "duplicate")
    assert len(api.received) == 1
    assert await shop.balance(pid) == (3750, 0)  # asking changes nothing
    assert await shop.drift() == 0


async def test_apple_down_is_a_503_and_the_retry_sends_it(
    apple_shop: AppleShop, api: StandIn
) -> None:
    pid, token = await apple_shop.account()
    _, signed = _tx(token)
    asked = apple.notification(CA, "CONSUMPTION_REQUEST", signed)
    api.status = 503
    with pytest.raises(ApiError) as down:
        await apple_shop.notify(asked)
    assert down.value.kind is ErrorKind.SERVICE_UNAVAILABLE
    api.status = 202
    assert await apple_shop.notify(asked) == ("consumption_request", "applied")
    body = api.received[-1].json()
    assert (body["deliveryStatus"], body["consumptionPercentage"]) == ("UNDELIVERED_OTHER", 0)
    del pid


async def test_redis_down_is_a_503_unmarked_and_apples_retry_credits_once(
    apple_shop: AppleShop, monkeypatch: pytest.MonkeyPatch
) -> None:
    shop = apple_shop.shop
    pid, token = await apple_shop.account()
    _, signed = _tx(token)
    charge = apple.notification(CA, "ONE_TIME_CHARGE", signed)
    real = shop.ledgers.money.grant
    calls = {"n": 0}

    async def failing(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RedisConnectionError("down")
        return await real(*args, **kwargs)

    monkeypatch.setattr(shop.ledgers.money, "grant", failing)
    with pytest.raises(ApiError) as down:
        await apple_shop.notify(charge)
    assert down.value.kind is ErrorKind.SERVICE_UNAVAILABLE
    assert await shop.balance(pid) == (0, 0)
    assert await apple_shop.notify(charge) == ("paid", "applied")  # Apple's retry: not seen
    assert (await apple_shop.send(pid, signed)).result == "duplicate"
    assert await shop.balance(pid) == (1000, 0)
    assert await shop.drift() == 0
