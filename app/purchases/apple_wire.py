"""What the App Store's routes read and answer, apart from Apple's library (which only a
server selling in the App Store loads: about 28 MB per worker)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from app.purchases.purchases import Result

APPLE = "apple"
SIGNED_TRANSACTION = "signed_transaction"
SIGNED_PAYLOAD = "signedPayload"
MAX_JWS_CHARS = 65_536
"""A JWS Apple signs (three certificates and the payload) is a few kilobytes."""

Jws = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_JWS_CHARS)]


class TransactionBody(msgspec.Struct):
    """``POST /v1/purchases/apple``: StoreKit 2's ``jwsRepresentation`` of a transaction."""

    signed_transaction: Jws


class NotificationBody(msgspec.Struct):
    """An App Store Server Notification V2."""

    signed_payload: Jws = msgspec.field(name=SIGNED_PAYLOAD)


class ApplePurchase(msgspec.Struct, kw_only=True):
    """``POST /v1/purchases/apple``'s answer: the transaction's purchase, and whether this
    call credited it (``applied``) or it was credited before (``duplicate``)."""

    id: str
    transaction_id: str
    product_id: str
    credits: int | None
    status: str  # granted, or unmatched (kept for an operator)
    result: Result
    object: Literal["purchase"] = "purchase"
