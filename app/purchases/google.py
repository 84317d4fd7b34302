"""Google Play purchases on svc's ledger: a purchase token proven by asking Google
(``google_api``), credited once per ``orderId`` to the account its
``obfuscatedExternalAccountId`` names, then consumed; voided purchases taken back.

Two ways in, one purchase: the app sends the token (``claim``), and Google's Real-time
developer notifications (``notify``) name it too, for when the app never did. Both become a
``paid`` ``PaymentEvent`` whose reference is the order id, so ``Purchases`` writes one
purchase however many of them come, and at once.

Consuming comes after the purchase is durable (a consumed purchase Google never refunds as
unacknowledged; one svc did not record must stay refundable). One consume per purchase: the
request that takes a short lease in Redis calls Google; a consume that fails gives the lease
back, and the next send of the token (Play Billing's ``queryPurchasesAsync`` returns the
purchases not consumed, which the app sends again) or notification consumes it, since
Google's answer then still says it is not consumed. Google refuses a second consume, which
svc takes as done.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from typing import Annotated, Literal

import msgspec

from app.core.errors import invalid_google_purchase, invalid_value
from app.core.validation import decode_json
from app.kv.client import REDIS_ERRORS, RedisClient
from app.kv.layout import KeySpace
from app.purchases.account_token import AccountTokens
from app.purchases.events import EventKind, PaymentEvent
from app.purchases.google_api import CANCELLED, PENDING, PURCHASED, TEST_PURCHASE, PlayApi
from app.purchases.google_api import PlayPurchase as PlayPurchase
from app.purchases.google_push import PushVerifier
from app.purchases.purchases import Purchases, Result
from app.store import Store
from app.store.purchases import PURCHASE_GRANTED

log = logging.getLogger("svc.purchases.google")

GOOGLE = "google"
CONSUME_LEASE_MS = 60_000  # longer than a consume call may take (its timeout: 10 s)
PURCHASED_NOTIFICATION = 1  # oneTimeProductNotification.notificationType ONE_TIME_PRODUCT_PURCHASED
ONE_TIME_PRODUCT = 2  # voidedPurchaseNotification.productType PRODUCT_TYPE_ONE_TIME

ProductId = Annotated[str, msgspec.Meta(min_length=1, max_length=150)]
PurchaseToken = Annotated[
    str, msgspec.Meta(min_length=1, max_length=4096, pattern=r"^[A-Za-z0-9._\-]+$")
]


class GoogleClaim(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/purchases/google``'s body: what Play Billing gave the app."""

    product_id: ProductId
    purchase_token: PurchaseToken


class Claimed(msgspec.Struct):
    """What svc did with a purchase the app sent: credited (``applied``, or ``duplicate``
    when it was before), ``pending`` (nothing written: send it again once it completes) or
    ``unmatched`` (kept for an operator: a notification stored it before the app sent it,
    when its token named no account svc knew)."""

    status: Literal["credited", "pending", "unmatched"]
    result: Result | None = None
    object: Literal["google_purchase"] = "google_purchase"


class _Message(msgspec.Struct):
    data: str
    message_id: str = msgspec.field(name="messageId")


class _Push(msgspec.Struct):
    message: _Message


class _OneTime(msgspec.Struct):
    notification_type: int = msgspec.field(name="notificationType")
    purchase_token: PurchaseToken = msgspec.field(name="purchaseToken")
    sku: ProductId


class _Voided(msgspec.Struct):
    order_id: str = msgspec.field(name="orderId")
    product_type: int = msgspec.field(name="productType")


class _Notification(msgspec.Struct):
    package_name: str = msgspec.field(name="packageName")
    one_time: _OneTime | None = msgspec.field(default=None, name="oneTimeProductNotification")
    voided: _Voided | None = msgspec.field(default=None, name="voidedPurchaseNotification")


class GooglePlay:
    """One app's Play purchases: ``products`` (product id → credits) it sells."""

    def __init__(
        self,
        api: PlayApi,
        push: PushVerifier | None,
        *,
        products: dict[str, int],
        accept_test_purchases: bool,
        purchases: Purchases,
        tokens: AccountTokens,
        store: Store,
        redis: RedisClient,
        layout: KeySpace,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.push = push
        self.products = products
        self.accept_test_purchases = accept_test_purchases
        self.purchases = purchases
        self.tokens = tokens
        self.store = store
        self.redis = redis
        self.layout = layout
        self.clock = clock

    async def claim(self, pid: str, body: bytes) -> Claimed:
        """The app's purchase for account ``pid``: credited once to ``pid`` when its token is
        ``pid``'s; 400 with nothing written when it can never be."""
        claim = decode_json(body, GoogleClaim)
        if claim.product_id not in self.products:
            raise invalid_value(
                "product_id", "svc does not sell this product (not in SVC_GOOGLE_PRODUCTS)."
            )
        found = await self.api.purchase(claim.product_id, claim.purchase_token)
        if found is None:
            raise invalid_google_purchase(
                "Google Play knows no purchase of this product with this token for this app."
            )
        if found.purchase_state == PENDING:
            return Claimed(status="pending")
        if found.purchase_state == CANCELLED:
            raise invalid_google_purchase("The purchase was cancelled: nothing was paid.")
        unpaid = self._unpaid(found)
        if unpaid:
            raise invalid_google_purchase(unpaid)
        self.tokens.check(pid, found.account_token, "obfuscatedExternalAccountId")
        result = await self._credit(pid, claim.product_id, claim.purchase_token, found)
        if not await self._granted(found.order_id or claim.purchase_token):
            # a notification kept it unmatched first (its token named no account then)
            return Claimed(status="unmatched", result="unmatched")
        return Claimed(status="credited", result=result)

    def _unpaid(self, found: PlayPurchase) -> str | None:
        """Why a purchase earns nothing though Google knows it (None: it earns)."""
        if found.purchase_state != PURCHASED:
            return "The purchase is not in the purchased state."
        if found.purchase_type is None:
            return None
        if found.purchase_type == TEST_PURCHASE and self.accept_test_purchases:
            return None
        return "A test, promotional or rewarded purchase (not charged) earns no credits here."

    async def _credit(
        self, pid: str | None, product_id: str, token: str, found: PlayPurchase
    ) -> Result:
        """The purchase on the ledger (``pid`` None: unmatched, for an operator), then
        consumed once it is."""
        order = found.order_id or token  # only promotional purchases lack one (refused)
        credits = self.products[product_id] * max(found.quantity or 1, 1)
        event = PaymentEvent(
            kind="paid",
            event_id=order,
            event_type="purchases.products.get",
            session_id=order,
            payment_intent=order,  # what a voided purchase's notification names
            account_pid=pid,
            credits=credits,
        )
        result = await self.purchases.apply(GOOGLE, event)
        if pid is not None and found.consumption_state == 0 and await self._granted(order):
            await self._consume(order, product_id, token)
        return result

    async def _granted(self, order: str) -> bool:
        """The order's purchase is stored as credited: not one kept unmatched (for an
        operator), which stays unconsumed so that Google refunds it unless one credits it."""
        stored = await self.store.get_purchase(f"{GOOGLE}:{order}")
        return stored is not None and stored.status == PURCHASE_GRANTED

    async def _consume(self, order: str, product_id: str, token: str) -> None:
        lease = self.layout.google_consume_lease(order)
        mine = secrets.token_hex(8)
        try:
            if not await self.redis.set(lease, mine, nx=True, px=CONSUME_LEASE_MS):
                return  # another request consumes it now
        except REDIS_ERRORS:
            return  # the next send consumes it: Google still says it is not consumed
        if await self.api.consume(product_id, token):
            return
        with contextlib.suppress(*REDIS_ERRORS):  # else the lease lapses within a minute
            await self.redis.delete(lease)  # the next send of the token tries again

    async def notify(self, authorization: str | None, body: bytes) -> tuple[EventKind, Result]:
        """A Pub/Sub push of a developer notification, once per message id: what it asked
        and what svc did. 401 for a push token svc cannot trust, nothing written."""
        assert self.push is not None, "the route answers 404 while pushes are off"
        await self.push.verify(authorization)
        push = decode_json(body, _Push)
        notice_id = f"{GOOGLE}:{push.message.message_id}"
        if await self.store.notice_seen(notice_id):
            return "ignored", "duplicate"
        kind, result = await self._notification(_decoded(push.message.data))
        # after its effect is durable: a crash before this makes Pub/Sub push it again, and
        # the purchase's and the entries' ids make that changes nothing twice
        await self.store.mark_notice(notice_id, GOOGLE, int(self.clock()))
        return kind, result

    async def _notification(self, note: _Notification) -> tuple[EventKind, Result]:
        if note.package_name != self.api.package:
            return "ignored", "ignored"
        if note.one_time is not None:
            return await self._purchased(note.one_time)
        if note.voided is not None and note.voided.product_type == ONE_TIME_PRODUCT:
            # a one-time product is voided whole (refunded, charged back or revoked)
            order = note.voided.order_id
            event = PaymentEvent(
                kind="refunded",
                event_id=f"voided:{order}",
                event_type="voidedPurchaseNotification",
                payment_intent=order,
                amount=1,
                amount_refunded=1,
            )
            return "refunded", await self.purchases.apply(GOOGLE, event)
        return "ignored", "ignored"  # a test notification, a subscription's, …

    async def _purchased(self, note: _OneTime) -> tuple[EventKind, Result]:
        if note.notification_type != PURCHASED_NOTIFICATION or note.sku not in self.products:
            return "ignored", "ignored"  # a cancelled pending purchase, another seller's
        found = await self.api.purchase(note.sku, note.purchase_token)
        if found is not None and found.purchase_state == PENDING:
            return "pending", "ignored"  # its completion is notified again
        if found is None or self._unpaid(found):
            return "ignored", "ignored"
        pid = await self.tokens.account_of(found.account_token)
        return "paid", await self._credit(pid, note.sku, note.purchase_token, found)

    async def close(self) -> None:
        await self.api.close()
        if self.push is not None:
            await self.push.close()


def _decoded(data: str) -> _Notification:
    """``message.data``: base64 of the DeveloperNotification's JSON."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise invalid_value("message.data", "message.data is not base64.") from None
    try:
        return msgspec.json.decode(raw, type=_Notification)
    except msgspec.DecodeError as exc:
        raise invalid_value(
            "message.data", f"message.data is not a Play developer notification: {exc}"
        ) from None
