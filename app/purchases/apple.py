"""App Store signed data, verified with Apple's own library and read into ``PaymentEvent``.

Every signature is checked offline by ``appstoreserverlibrary``'s ``SignedDataVerifier``:
the JWS's x5c chain of three certificates to a root of ``SVC_APPLE_ROOT_CERTS`` (valid when
it was signed), Apple's certificate OIDs, ES256, then the bundle id, the app's Apple ID
(notifications, in Production) and the environment. svc then reads what it sells: a
consumable of ``SVC_APPLE_PRODUCTS``, one purchase per ``transactionId`` (the purchase's
reference and the payment its refunds name), its credits the product's, its amount Apple's
``price`` in milliunits of ``currency``.
"""

from __future__ import annotations

from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.models.JWSTransactionDecodedPayload import (
    JWSTransactionDecodedPayload,
)
from appstoreserverlibrary.models.ResponseBodyV2DecodedPayload import (
    ResponseBodyV2DecodedPayload,
)
from appstoreserverlibrary.models.RevocationType import RevocationType
from appstoreserverlibrary.models.Type import Type
from appstoreserverlibrary.signed_data_verifier import (
    SignedDataVerifier,
    VerificationException,
    VerificationStatus,
)

from app.core.errors import ApiError, PurchaseRefused, invalid_apple_signature, invalid_value
from app.purchases.apple_config import AppleConfig
from app.purchases.apple_wire import APPLE, SIGNED_PAYLOAD
from app.purchases.events import EventKind, PaymentEvent

WHOLE = 100_000
"""A whole purchase in milliunits: how Apple gives a prorated refund's share
(``revocationPercentage``) and takes the share consumed."""


_PROBLEMS = {
    VerificationStatus.INVALID_APP_IDENTIFIER: "It is another app's (bundle id or Apple ID).",
    VerificationStatus.INVALID_ENVIRONMENT: "It is from another App Store environment.",
}


class AppleReader:
    """Verifies what the App Store signed, and reads it as svc's purchases."""

    def __init__(self, config: AppleConfig) -> None:
        self.config = config
        self.verifier = SignedDataVerifier(
            list(config.root_certs),
            False,  # offline: no OCSP (the chain is checked as of its signing date)
            Environment(config.environment),
            config.bundle_id,
            config.app_id,
        )

    def transaction(self, signed: str, field: str) -> JWSTransactionDecodedPayload:
        """The verified transaction, or a 400 naming ``field``."""
        try:
            found = self.verifier.verify_and_decode_signed_transaction(signed)
        except VerificationException as exc:
            raise _unverified(field, exc.status) from None
        except Exception:  # a payload Apple's models cannot read: not one Apple signed
            raise _unverified(field, VerificationStatus.VERIFICATION_FAILURE) from None
        if not found.transactionId:
            raise invalid_value(field, "The App Store transaction has no transactionId.")
        return found

    def notification(self, signed: str) -> ResponseBodyV2DecodedPayload:
        """The verified notification, or a 400 naming ``signedPayload``."""
        try:
            found = self.verifier.verify_and_decode_notification(signed)
        except VerificationException as exc:
            raise _unverified(SIGNED_PAYLOAD, exc.status) from None
        except Exception:  # as above
            raise _unverified(SIGNED_PAYLOAD, VerificationStatus.VERIFICATION_FAILURE) from None
        if not found.notificationUUID:
            raise invalid_value(SIGNED_PAYLOAD, "The notification has no notificationUUID.")
        return found

    def credits(self, tx: JWSTransactionDecodedPayload) -> int:
        """The credits a transaction of svc's products grants; ``PurchaseRefused`` for any other."""
        if tx.type is not Type.CONSUMABLE:
            raise PurchaseRefused(
                f"The transaction is of a {tx.rawType or 'product of no type'}: svc sells "
                "consumable products only."
            )
        credits = self.config.products.get(tx.productId or "")
        if credits is None:
            raise PurchaseRefused(
                f"The transaction's product {str(tx.productId)[:64]!r} is not one of "
                "SVC_APPLE_PRODUCTS."
            )
        return credits

    def purchase(
        self, tx: JWSTransactionDecodedPayload, event_id: str, account_pid: str | None
    ) -> PaymentEvent:
        """A transaction of svc's products (``credits`` accepted it) as its purchase."""
        return PaymentEvent(
            kind="paid",
            event_id=event_id,
            event_type="transaction",
            session_id=tx.transactionId,
            payment_intent=tx.transactionId,
            account_pid=account_pid,
            credits=self.credits(tx),
            amount_total=tx.price,
            currency=tx.currency,
        )


def purchase_id(transaction_id: str) -> str:
    """The purchase a transaction is (``Purchases``' ``source:reference``)."""
    return f"{APPLE}:{transaction_id}"


def refund_event(
    tx: JWSTransactionDecodedPayload, kind: EventKind, event_id: str, event_type: str
) -> PaymentEvent:
    """A REFUND (its share: all of the purchase, or a prorated refund's
    ``revocationPercentage``) or a REFUND_REVERSED of the transaction."""
    refunded = WHOLE
    if tx.revocationType is RevocationType.REFUND_PRORATED and tx.revocationPercentage:
        refunded = min(WHOLE, max(0, tx.revocationPercentage))
    return PaymentEvent(
        kind=kind,
        event_id=event_id,
        event_type=event_type,
        payment_intent=tx.transactionId,
        amount=WHOLE,
        amount_refunded=refunded,
        currency=tx.currency,
    )


def _unverified(field: str, status: VerificationStatus) -> ApiError:
    problem = _PROBLEMS.get(
        status,
        "Its signature or certificate chain does not verify (or a certificate was not "
        "valid when it was signed).",
    )
    return invalid_apple_signature(field, problem)
