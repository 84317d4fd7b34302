"""Google Play purchases below HTTP (issue 47 item 3): a local stand-in for Google's token
endpoint, Play Developer API and OIDC certificates (``tests.support.google_play``, keys the
test makes) and svc's ``GooglePlay`` on the purchase ledger: one purchase per order however
it arrives, consumed once after the commit, only to its token's account; pending, cancelled,
test, unknown and foreign purchases; Google down; push tokens; voided purchases. The money
rules and reconcile clean after each."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from app.core.errors import ApiError, ErrorKind, SettingsError
from app.core.settings import Settings
from app.kv.client import RedisClient
from app.purchases.account_token import AccountTokens
from app.purchases.google import GooglePlay
from app.purchases.google_setup import google_play
from tests.support import google_play as play
from tests.support.databases import Database
from tests.support.scripts_helpers import key, reserve
from tests.unit.purchases.test_purchase_ledger import Shop, _shop


class Play:
    """A shop that sells on Google Play, and the Google it asks."""

    def __init__(self, shop: Shop, google: play.FakeGoogle, **settings: Any) -> None:
        self.shop, self.google = shop, google
        self.tokens = AccountTokens(shop.store, b"pepper", shop.clock)
        env = {k.removeprefix("SVC_").lower(): v for k, v in google.env().items()}
        made = google_play(
            Settings(**{**env, **settings}),
            purchases=shop.purchases,
            tokens=self.tokens,
            store=shop.store,
            redis=shop.redis,
            layout=shop.layout,
            clock=shop.clock,
        )
        assert made is not None
        self.play: GooglePlay = made

    async def account(self) -> tuple[str, str]:
        pid = await self.shop.accounts.create_account()
        return pid, (await self.tokens.issue(pid)).app_account_token

    def sell(self, token: str, account_token: str | None, order: str, **kw: Any) -> None:
        self.google.add(token, play.Purchase("credits_small", account_token, order, **kw))

    async def claim(self, pid: str, token: str, product: str = "credits_small") -> Any:
        body = json.dumps({"product_id": product, "purchase_token": token}).encode()
        return await self.play.claim(pid, body)

    async def notify(self, notification: dict[str, Any], message_id: str | None = None) -> Any:
        body = self.google.push(notification, message_id)
        return await self.play.notify(f"Bearer {self.google.push_token()}", body)

    async def written(self, pid: str) -> tuple[tuple[int, int], list[tuple[str, int, int]]]:
        return await self.shop.balance(pid), await self.shop.entries(pid)


def _bought(token: str, notification_type: int = 1) -> dict[str, Any]:
    return {
        "packageName": play.PACKAGE,
        "oneTimeProductNotification": {
            "version": "1.0",
            "notificationType": notification_type,
            "purchaseToken": token,
            "sku": "credits_small",
        },
    }


def _voided(order: str, product_type: int = 2) -> dict[str, Any]:
    return {
        "packageName": play.PACKAGE,
        "voidedPurchaseNotification": {
            "purchaseToken": "tok",
            "orderId": order,
            "productType": product_type,
            "refundType": 1,
        },
    }


@pytest.fixture(scope="module")
def google(tmp_path_factory: pytest.TempPathFactory) -> Iterator[play.FakeGoogle]:
    with play.FakeGoogle(tmp_path_factory.mktemp("google")) as fake:
        yield fake


@pytest.fixture
async def shop(tmp_path: Path) -> AsyncIterator[Shop]:
    redis: RedisClient = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    made = await _shop(redis, tmp_path)
    yield made
    await made.store.close()
    await redis.aclose()


@pytest.fixture
async def seller(shop: Shop, google: play.FakeGoogle) -> AsyncIterator[Play]:
    google.down = google.consume_down = False
    made = Play(shop, google)
    yield made
    await made.play.close()


async def test_a_purchase_is_credited_once_then_consumed_once(seller: Play) -> None:
    pid, token = await seller.account()
    seller.sell("tok-once", token, "GPA.0001")
    before = len(seller.google.calls.consumes)
    first = await seller.claim(pid, "tok-once")
    assert (first.status, first.result) == ("credited", "applied")
    assert await seller.written(pid) == ((1000, 0), [("purchase", 1000, 0)])
    consumes = seller.google.calls.consumes[before:]
    assert [t for t, _ in consumes] == ["tok-once"]
    again = await seller.claim(pid, "tok-once")  # Google says consumed: not consumed twice
    assert (again.status, again.result) == ("credited", "duplicate")
    assert len(seller.google.calls.consumes) == before + 1
    assert await seller.written(pid) == ((1000, 0), [("purchase", 1000, 0)])
    assert await seller.shop.drift() == 0


async def test_sends_and_a_notification_at_once_credit_and_consume_once(
    real_redis: RedisClient, database: Database, tmp_path: Path, google: play.FakeGoogle
) -> None:
    shop = await _shop(real_redis, tmp_path, database)
    seller = Play(shop, google)
    try:
        pid, token = await seller.account()
        seller.sell("tok-race", token, "GPA.0002", quantity=2)
        before = len(google.calls.consumes)
        results = await asyncio.gather(
            *(seller.claim(pid, "tok-race") for _ in range(6)), seller.notify(_bought("tok-race"))
        )
        sent = [r.result for r in results[:-1]]
        assert sent.count("applied") + (results[-1][1] == "applied") == 1
        assert await seller.written(pid) == ((2000, 0), [("purchase", 2000, 0)])  # quantity 2
        assert [t for t, _ in google.calls.consumes[before:]] == ["tok-race"]
        assert await shop.drift() == 0
    finally:
        await seller.play.close()
        await shop.store.close()


async def test_consume_comes_after_the_purchase_is_stored(seller: Play) -> None:
    pid, token = await seller.account()
    seller.sell("tok-after", token, "GPA.0003")
    stored_when_consumed: list[bool] = []
    api = seller.play.api
    consume = api.consume

    async def watched(product_id: str, purchase_token: str) -> bool:
        stored = await seller.shop.store.get_purchase("google:GPA.0003")
        stored_when_consumed.append(stored is not None)
        return await consume(product_id, purchase_token)

    api.consume = watched  # type: ignore[method-assign]
    await seller.claim(pid, "tok-after")
    assert stored_when_consumed == [True]


async def test_a_failed_consume_is_retried_by_the_next_send(seller: Play) -> None:
    pid, token = await seller.account()
    seller.sell("tok-retry", token, "GPA.0004")
    seller.google.consume_down = True
    assert (await seller.claim(pid, "tok-retry")).result == "applied"
    assert seller.google.purchases["tok-retry"].consumed == 0
    seller.google.consume_down = False
    assert (await seller.claim(pid, "tok-retry")).result == "duplicate"
    assert seller.google.purchases["tok-retry"].consumed == 1
    assert await seller.written(pid) == ((1000, 0), [("purchase", 1000, 0)])


async def test_another_accounts_token_credits_no_one_but_its_own(seller: Play) -> None:
    owner, token = await seller.account()
    other, _ = await seller.account()
    seller.sell("tok-owner", token, "GPA.0005")
    with pytest.raises(ApiError) as refused:
        await seller.claim(other, "tok-owner")
    assert refused.value.kind is ErrorKind.ACCOUNT_TOKEN_MISMATCH
    assert await seller.written(other) == ((0, 0), [])
    assert await seller.shop.store.get_purchase("google:GPA.0005") is None
    assert seller.google.purchases["tok-owner"].consumed == 0
    assert (await seller.claim(owner, "tok-owner")).result == "applied"
    assert await seller.written(owner) == ((1000, 0), [("purchase", 1000, 0)])


@pytest.mark.parametrize(
    ("setup", "product", "kind"),
    [
        ({"state": 1}, "credits_small", ErrorKind.INVALID_GOOGLE_PURCHASE),  # cancelled
        ({"purchase_type": 0}, "credits_small", ErrorKind.INVALID_GOOGLE_PURCHASE),  # test
        ({"purchase_type": 1}, "credits_small", ErrorKind.INVALID_GOOGLE_PURCHASE),  # promo
        ({"package": "com.other.app"}, "credits_small", ErrorKind.INVALID_GOOGLE_PURCHASE),
        ({}, "credits_large", ErrorKind.INVALID_GOOGLE_PURCHASE),  # bought another product
        ({}, "credits_unsold", ErrorKind.INVALID_VALUE),
    ],
)
async def test_purchases_that_can_never_be_credited_write_nothing(
    seller: Play, setup: dict[str, Any], product: str, kind: ErrorKind
) -> None:
    pid, token = await seller.account()
    seller.sell("tok-bad", token, "GPA.0006", **setup)
    with pytest.raises(ApiError) as refused:
        await seller.claim(pid, "tok-bad", product)
    assert (refused.value.kind, refused.value.status) == (kind, 400)
    assert await seller.written(pid) == ((0, 0), [])
    assert await seller.shop.store.get_purchase("google:GPA.0006") is None


async def test_test_purchases_only_when_accepted(shop: Shop, google: play.FakeGoogle) -> None:
    seller = Play(shop, google, google_accept_test_purchases=True)
    pid, token = await seller.account()
    seller.sell("tok-tester", token, "GPA.0007", purchase_type=0)
    assert (await seller.claim(pid, "tok-tester")).result == "applied"
    await seller.play.close()


async def test_a_pending_purchase_is_credited_once_it_completes(seller: Play) -> None:
    pid, token = await seller.account()
    seller.sell("tok-pending", token, "GPA.0008", state=2)
    assert (await seller.claim(pid, "tok-pending")).status == "pending"
    assert await seller.notify(_bought("tok-pending")) == ("pending", "ignored")
    assert await seller.written(pid) == ((0, 0), [])
    assert seller.google.purchases["tok-pending"].consumed == 0
    seller.google.purchases["tok-pending"].state = 0  # the bank transfer arrived
    assert await seller.notify(_bought("tok-pending")) == ("paid", "applied")
    assert seller.google.purchases["tok-pending"].consumed == 1
    assert (await seller.claim(pid, "tok-pending")).result == "duplicate"
    assert await seller.written(pid) == ((1000, 0), [("purchase", 1000, 0)])


async def test_google_down_is_a_503_and_the_retry_credits_once(seller: Play) -> None:
    pid, token = await seller.account()
    seller.sell("tok-down", token, "GPA.0009")
    seller.google.down = True
    with pytest.raises(ApiError) as refused:
        await seller.claim(pid, "tok-down")
    assert refused.value.kind is ErrorKind.SERVICE_UNAVAILABLE
    with pytest.raises(ApiError):
        await seller.notify(_bought("tok-down"), "msg-down")
    assert await seller.written(pid) == ((0, 0), [])
    assert not await seller.shop.store.notice_seen("google:msg-down")  # Pub/Sub pushes again
    seller.google.down = False
    assert await seller.notify(_bought("tok-down"), "msg-down") == ("paid", "applied")
    assert (await seller.claim(pid, "tok-down")).result == "duplicate"
    assert await seller.written(pid) == ((1000, 0), [("purchase", 1000, 0)])
    assert await seller.shop.drift() == 0


async def test_a_notification_is_applied_once_per_message(seller: Play) -> None:
    pid, token = await seller.account()
    seller.sell("tok-note", token, "GPA.0010")
    assert await seller.notify(_bought("tok-note"), "msg-1") == ("paid", "applied")
    assert await seller.notify(_bought("tok-note"), "msg-1") == ("ignored", "duplicate")
    assert await seller.notify({"packageName": play.PACKAGE, "testNotification": {}}) == (
        "ignored",
        "ignored",
    )
    other_app = {**_bought("tok-note"), "packageName": "com.other.app"}
    assert await seller.notify(other_app) == ("ignored", "ignored")
    assert await seller.written(pid) == ((1000, 0), [("purchase", 1000, 0)])


async def test_an_unknown_token_is_kept_unmatched_and_not_consumed(seller: Play) -> None:
    seller.sell("tok-nobody", "6f1c1a52-0000-8000-8000-000000000000", "GPA.0011")
    assert await seller.notify(_bought("tok-nobody")) == ("paid", "unmatched")
    stored = await seller.shop.store.get_purchase("google:GPA.0011")
    assert stored is not None
    assert stored.account_pid is None
    assert seller.google.purchases["tok-nobody"].consumed == 0  # Google refunds it


async def test_an_unmatched_purchase_is_not_consumed_when_the_app_sends_it(seller: Play) -> None:
    pid = await seller.shop.accounts.create_account()
    token = seller.tokens.of(pid)  # never served: a notification cannot name its account
    seller.sell("tok-unserved", token, "GPA.0015")
    assert await seller.notify(_bought("tok-unserved")) == ("paid", "unmatched")
    claimed = await seller.claim(pid, "tok-unserved")
    assert (claimed.status, claimed.result) == ("unmatched", "unmatched")
    assert seller.google.purchases["tok-unserved"].consumed == 0
    assert await seller.written(pid) == ((0, 0), [])


async def test_voided_after_spending_is_debt(seller: Play) -> None:
    shop = seller.shop
    pid, token = await seller.account()
    ident = await key(shop.ledgers, pid, "k1")
    seller.sell("tok-void", token, "GPA.0012")
    await seller.claim(pid, "tok-void")
    hold = await reserve(shop.ledgers, ident, "rsv1", shop.clock(), max_out=600)
    await shop.ledgers.holds.settle(
        hold, now=shop.clock(), credits_used=600, completion_tokens=600, outcome="completed"
    )
    assert await seller.notify(_voided("GPA.0012", product_type=1)) == ("ignored", "ignored")
    assert await seller.notify(_voided("GPA.0012")) == ("refunded", "applied")
    assert await seller.notify(_voided("GPA.0012")) == ("refunded", "duplicate")
    assert await shop.balance(pid) == (0, 600)
    with pytest.raises(ApiError) as refused:
        await reserve(shop.ledgers, ident, "rsv2", shop.clock())
    assert refused.value.kind is ErrorKind.ACCOUNT_IN_DEBT
    assert await shop.drift() == 0


async def test_a_void_before_its_purchase_is_kept_and_applied_then(seller: Play) -> None:
    pid, token = await seller.account()
    assert await seller.notify(_voided("GPA.0013")) == ("refunded", "kept")
    seller.sell("tok-late", token, "GPA.0013")
    await seller.claim(pid, "tok-late")
    assert await seller.shop.balance(pid) == (0, 0)
    assert await seller.shop.drift() == 0


def _forged() -> dict[str, Any]:
    return {"key": play.rsa_key()}


@pytest.mark.parametrize(
    "claims",
    [
        {"exp": 1_700_000_000, "iat": 1_699_990_000},  # expired
        {"aud": "https://attacker.example/push"},
        {"email": "someone@evil.iam.gserviceaccount.com"},
        {"email_verified": False},
        {"email_verified": None},
        {"iss": "https://evil.example"},
        "forged",
        "unknown kid",
        "no header",
    ],
)
async def test_a_push_svc_cannot_trust_is_401_with_nothing_written(
    seller: Play, claims: dict[str, Any] | str
) -> None:
    pid, token = await seller.account()
    seller.sell("tok-push", token, "GPA.0014")
    body = seller.google.push(_bought("tok-push"), "msg-push")
    if claims == "no header":
        header = None
    elif claims == "forged":
        header = f"Bearer {seller.google.push_token(**_forged())}"
    elif claims == "unknown kid":
        header = f"Bearer {seller.google.push_token(kid='nope', **_forged())}"
    else:
        assert isinstance(claims, dict)
        header = f"Bearer {seller.google.push_token(**claims)}"
    with pytest.raises(ApiError) as refused:
        await seller.play.notify(header, body)
    assert (refused.value.kind, refused.value.status) == (ErrorKind.INVALID_PUSH_TOKEN, 401)
    assert await seller.written(pid) == ((0, 0), [])
    assert not await seller.shop.store.notice_seen("google:msg-push")


async def test_the_certificates_are_fetched_once_while_fresh(seller: Play) -> None:
    push = seller.play.push
    assert push is not None
    now = [1000.0]
    push.clock = lambda: now[0]
    for _ in range(3):
        await push.verify(f"Bearer {seller.google.push_token()}")
    assert push.fetches == 1
    other = f"Bearer {seller.google.push_token(kid='other', **_forged())}"
    with pytest.raises(ApiError):  # an unknown key id, just after a fetch: no refetch
        await push.verify(other)
    assert push.fetches == 1
    now[0] += 61
    for _ in range(2):  # then one refetch a minute, however many come
        with pytest.raises(ApiError):
            await push.verify(other)
    assert push.fetches == 2
    now[0] += 300  # past the answer's max-age: fetched again
    await push.verify(f"Bearer {seller.google.push_token()}")
    assert push.fetches == 3


async def test_a_push_that_is_not_one_is_a_400(seller: Play) -> None:
    auth = f"Bearer {seller.google.push_token()}"
    bad_data = json.dumps({"message": {"data": "%%%", "messageId": "m"}}).encode()
    not_json = base64.b64encode(b"nope").decode()
    for body in (
        b"{}",
        bad_data,
        json.dumps({"message": {"data": not_json, "messageId": "m"}}).encode(),
    ):
        with pytest.raises(ApiError) as refused:
            await seller.play.notify(auth, body)
        assert refused.value.kind is ErrorKind.INVALID_VALUE


async def test_google_play_is_off_until_configured(shop: Shop, google: play.FakeGoogle) -> None:
    env = {k.removeprefix("SVC_").lower(): v for k, v in google.env().items()}
    for missing in ("google_package_name", "google_products", "google_service_account_file"):
        settings = Settings(**{**env, missing: Settings.default(missing)})
        made = google_play(
            settings,
            purchases=shop.purchases,
            tokens=AccountTokens(shop.store, b"p", shop.clock),
            store=shop.store,
            redis=shop.redis,
            layout=shop.layout,
            clock=shop.clock,
        )
        assert made is None, missing
    for missing in ("google_push_audience", "google_push_service_account"):
        settings = Settings(**{**env, missing: ""})
        on = google_play(
            settings,
            purchases=shop.purchases,
            tokens=AccountTokens(shop.store, b"p", shop.clock),
            store=shop.store,
            redis=shop.redis,
            layout=shop.layout,
            clock=shop.clock,
        )
        assert on is not None
        assert on.push is None, missing  # notifications off: the route answers 404
        await on.close()


async def test_an_unreadable_key_file_refuses_to_start_naming_no_key(
    shop: Shop, google: play.FakeGoogle, tmp_path: Path
) -> None:
    env = {k.removeprefix("SVC_").lower(): v for k, v in google.env().items()}
    broken = tmp_path / "broken.json"
    broken.write_text('{"type": "service_account", "private_key": "-----BEGIN SECRET-----"}')
    for path in (str(broken), str(tmp_path / "missing.json")):
        with pytest.raises(SettingsError, match="SVC_GOOGLE_SERVICE_ACCOUNT_FILE") as refused:
            google_play(
                Settings(**{**env, "google_service_account_file": path}),
                purchases=shop.purchases,
                tokens=AccountTokens(shop.store, b"p", shop.clock),
                store=shop.store,
                redis=shop.redis,
                layout=shop.layout,
                clock=shop.clock,
            )
        assert "SECRET" not in str(refused.value)


@pytest.mark.parametrize(
    "setting", ["google_play_api_url", "google_token_url", "google_oidc_certs_url"]
)
@pytest.mark.parametrize("url", ["http://play.example.com", "ftp://127.0.0.1/x", "https://"])
async def test_google_urls_must_be_https_or_loopback(
    shop: Shop, google: play.FakeGoogle, setting: str, url: str
) -> None:
    env = {k.removeprefix("SVC_").lower(): v for k, v in google.env().items()}
    with pytest.raises(SettingsError, match=setting.upper()):
        google_play(
            Settings(**{**env, setting: url}),
            purchases=shop.purchases,
            tokens=AccountTokens(shop.store, b"p", shop.clock),
            store=shop.store,
            redis=shop.redis,
            layout=shop.layout,
            clock=shop.clock,
        )
