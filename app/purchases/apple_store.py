"""App Store purchases on svc's ledger: what the app sends (``record``) and what the App
Store notifies (``notify``), each verified by ``AppleReader`` and applied by ``Purchases``
(one purchase per transaction, written to the store before Redis).

The app sends a transaction for the calling account: its ``appAccountToken`` must be that
account's, so a transaction is credited to the account it was bought for whoever sends it.
A notification names no caller: its transaction's token leads to the account
(``AccountTokens.account_of``), and a token svc never served keeps the purchase unmatched
for an operator. A notification is handled once per ``notificationUUID``: marked seen only
after its effect is durable, so a crash in between makes Apple send it again (and its effect
is idempotent anyway, by the purchase's and the entries' ids).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from appstoreserverlibrary.models.JWSTransactionDecodedPayload import (
    JWSTransactionDecodedPayload,
)
from appstoreserverlibrary.models.NotificationTypeV2 import NotificationTypeV2
from appstoreserverlibrary.models.ResponseBodyV2DecodedPayload import (
    ResponseBodyV2DecodedPayload,
)

from app.accounts.accounts import Accounts
from app.core.errors import PurchaseRefused, invalid_value, service_unavailable
from app.core.validation import decode_json
from app.purchases.account_token import AccountTokens
from app.purchases.apple import AppleReader, purchase_id, refund_event
from app.purchases.apple_config import AppleConfig
from app.purchases.apple_consumption import consumption_of, send_consumption
from app.purchases.apple_wire import (
    APPLE,
    SIGNED_PAYLOAD,
    SIGNED_TRANSACTION,
    ApplePurchase,
    NotificationBody,
    TransactionBody,
)
from app.purchases.events import EventKind
from app.purchases.purchases import Purchases, Result
from app.store import Store

log = logging.getLogger("svc.purchases.apple")

TOKEN_FIELD = f"{SIGNED_TRANSACTION}.appAccountToken"
NOTICE_TRANSACTION = f"{SIGNED_PAYLOAD}.data.signedTransactionInfo"
_KINDS: dict[NotificationTypeV2 | None, EventKind] = {
    NotificationTypeV2.ONE_TIME_CHARGE: "paid",
    NotificationTypeV2.REFUND: "refunded",
    NotificationTypeV2.REFUND_REVERSED: "refund_reversed",
    NotificationTypeV2.CONSUMPTION_REQUEST: "consumption_request",
}


class AppleStore:
    def __init__(
        self,
        config: AppleConfig,
        purchases: Purchases,
        tokens: AccountTokens,
        accounts: Accounts,
        store: Store,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.reader = AppleReader(config)
        self.purchases, self.tokens, self.accounts = purchases, tokens, accounts
        self.store, self.clock = store, clock

    async def record(self, pid: str, body: bytes) -> ApplePurchase:
        """The app's transaction for account ``pid``: credited once, or a 400 naming the
        field with nothing written."""
        signed = decode_json(body, TransactionBody).signed_transaction
        tx = self.reader.transaction(signed, SIGNED_TRANSACTION)
        self.tokens.check(pid, tx.appAccountToken, TOKEN_FIELD)
        if tx.revocationDate is not None:
            raise invalid_value(
                SIGNED_TRANSACTION,
                "The transaction was refunded or revoked (it has a revocationDate): it grants "
                "no credits.",
            )
        try:
            event = self.reader.purchase(tx, f"transaction:{tx.transactionId}", pid)
        except PurchaseRefused as refused:
            raise invalid_value(SIGNED_TRANSACTION, refused.reason) from None
        result = await self.purchases.apply(APPLE, event)
        stored = await self.store.get_purchase(purchase_id(event.session_id or ""))
        if stored is None:  # written before apply answered
            raise service_unavailable()
        return ApplePurchase(
            id=stored.purchase_id,
            transaction_id=stored.reference,
            product_id=tx.productId or "",
            credits=stored.credits,
            status=stored.status,
            result="duplicate" if result == "duplicate" else "applied",
        )

    async def notify(self, body: bytes) -> tuple[EventKind, Result]:
        """An App Store Server Notification V2, handled once: the kind it came to and what
        svc did."""
        signed = decode_json(body, NotificationBody).signed_payload
        notice = self.reader.notification(signed)
        kind = _KINDS.get(notice.notificationType, "ignored")
        notice_id = f"{APPLE}:{notice.notificationUUID}"
        if await self.store.notice_seen(notice_id):
            return kind, "duplicate"
        result = await self._handle(notice, kind)
        await self.store.mark_notice(notice_id, APPLE, int(self.clock()))
        return kind, result

    async def _handle(self, notice: ResponseBodyV2DecodedPayload, kind: EventKind) -> Result:
        if kind == "ignored":
            return "ignored"  # TEST, and the types of subscriptions svc does not sell
        signed = notice.data.signedTransactionInfo if notice.data else None
        if not signed:
            raise invalid_value(NOTICE_TRANSACTION, f"A {kind} notification names a transaction.")
        tx = self.reader.transaction(signed, NOTICE_TRANSACTION)
        try:
            self.reader.credits(tx)
        except PurchaseRefused as refused:  # a product svc does not sell: not svc's to answer
            log.info("App Store notification ignored: %s", refused.reason)
            return "ignored"
        event_id = str(notice.notificationUUID)
        event_type = str(notice.rawNotificationType)
        if kind == "paid":
            if tx.revocationDate is not None:
                return "ignored"  # refunded already: its REFUND says so
            pid = await self.tokens.account_of(tx.appAccountToken)
            return await self.purchases.apply(APPLE, self.reader.purchase(tx, event_id, pid))
        if kind == "consumption_request":
            return await self._consumption(tx)
        return await self.purchases.apply(APPLE, refund_event(tx, kind, event_id, event_type))

    async def _consumption(self, tx: JWSTransactionDecodedPayload) -> Result:
        """Apple's question before it decides a refund, answered from the ledger when the
        app's users consented; a 503 when Apple could not be told (Apple asks again)."""
        if not self.config.consumption_consent:
            return "ignored"
        transaction = tx.transactionId or ""
        purchase = await self.store.get_purchase(purchase_id(transaction))
        request = await consumption_of(purchase, self.accounts)
        api = self.config.api
        if api is None:  # apple_config sets it with the consent
            raise service_unavailable()
        config = self.config
        sent = await send_consumption(
            api, config.bundle_id, config.environment, transaction, request
        )
        return "applied" if sent else "ignored"
