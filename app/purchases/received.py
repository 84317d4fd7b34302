"""What the stores send svc, received: each store's event (Stripe's webhook events, the app's
Google Play purchase and App Store transaction, Google's and Apple's notifications) handled
by its store's owner and counted once in ``svc_purchase_events`` by store, what it asked
and what svc did: a refusal by the label its cause gets (``invalid_signature`` for what
the store did not sign or svc cannot trust, ``unavailable`` for what could not be recorded
and will come again). A store that is off answers the 404 naming the settings that turn it
on. The routes only read the request and answer what these return."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from app.core.errors import ApiError, ErrorKind, StoreError
from app.core.metrics import METRICS
from app.purchases.apple_wire import APPLE, ApplePurchase
from app.purchases.google import GOOGLE, Claimed, GooglePlay
from app.purchases.purchases import Purchases, Result
from app.purchases.stripe_events import payment_event
from app.purchases.stripe_signature import verify

if TYPE_CHECKING:  # the type only: Apple's library is imported when the App Store is on
    from app.purchases.apple_store import AppleStore

STRIPE = "stripe"
ReadBody = Callable[[], Awaitable[bytes]]
"""The request's body, read once the store is known to be on (a store that is off is
answered 404 unread)."""
_APPLE_REFUSED = (ErrorKind.INVALID_APPLE_SIGNATURE, ErrorKind.INVALID_VALUE)


def _count(store: str, event: str, result: str) -> None:
    METRICS.labelled(METRICS.purchase_events, store, event, result).inc()


async def stripe_event(
    purchases: Purchases,
    secrets: Sequence[str],
    read: ReadBody,
    signature: str | None,
    clock: Callable[[], float],
) -> Result:
    """A Stripe webhook event (``signature``: its ``Stripe-Signature``) checked against
    ``secrets`` (404 while none is set) at ``clock``'s time once it is read, and applied."""
    if not secrets:
        raise ApiError(
            ErrorKind.NOT_FOUND,
            "Stripe purchases are off: the operator sets SVC_STRIPE_WEBHOOK_SECRETS.",
        )
    body = await read()
    try:
        verify(body, signature, secrets, clock())
    except ApiError:
        _count(STRIPE, "invalid", "invalid_signature")
        raise
    event = payment_event(body)
    try:
        result = await purchases.apply(STRIPE, event)
    except (ApiError, StoreError):
        _count(STRIPE, event.kind, "unavailable")
        raise
    _count(STRIPE, event.kind, result)
    return result


def _google(google: GooglePlay | None) -> GooglePlay:
    if google is None:
        raise ApiError(
            ErrorKind.NOT_FOUND,
            "Google Play purchases are off: the operator sets SVC_GOOGLE_PACKAGE_NAME, "
            "SVC_GOOGLE_PRODUCTS and SVC_GOOGLE_SERVICE_ACCOUNT_FILE.",
        )
    return google


async def google_claim(google: GooglePlay | None, pid: str, read: ReadBody) -> Claimed:
    """The app's Play purchase for account ``pid`` (``GooglePlay.claim``), 404 while Google
    Play is off."""
    play = _google(google)
    try:
        claimed = await play.claim(pid, await read())
    except (ApiError, StoreError) as refused:
        if not isinstance(refused, ApiError) or refused.status >= 500:
            _count(GOOGLE, "paid", "unavailable")
        raise
    _count(GOOGLE, "pending" if claimed.result is None else "paid", claimed.result or "ignored")
    return claimed


async def google_notification(
    google: GooglePlay | None, authorization: str | None, read: ReadBody
) -> Result:
    """A Pub/Sub push of Google's notification (``GooglePlay.notify``), 404 while Google
    Play or its pushes are off."""
    play = _google(google)
    if play.push is None:
        raise ApiError(
            ErrorKind.NOT_FOUND,
            "Google Play notifications are off: the operator sets "
            "SVC_GOOGLE_PUSH_AUDIENCE and SVC_GOOGLE_PUSH_SERVICE_ACCOUNT.",
        )
    body = await read()
    try:
        kind, result = await play.notify(authorization, body)
    except (ApiError, StoreError) as refused:
        if isinstance(refused, ApiError) and refused.kind is ErrorKind.INVALID_PUSH_TOKEN:
            _count(GOOGLE, "invalid", "invalid_signature")
        elif not isinstance(refused, ApiError) or refused.status >= 500:
            _count(GOOGLE, "ignored", "unavailable")
        raise
    _count(GOOGLE, kind, result)
    return result


def _apple(apple: AppleStore | None) -> AppleStore:
    if apple is None:
        raise ApiError(
            ErrorKind.NOT_FOUND,
            "App Store purchases are off: the operator sets SVC_APPLE_BUNDLE_ID and "
            "SVC_APPLE_PRODUCTS.",
        )
    return apple


async def apple_transaction(apple: AppleStore | None, pid: str, read: ReadBody) -> ApplePurchase:
    """The app's App Store transaction for account ``pid`` (``AppleStore.record``), 404
    while the App Store is off."""
    store = _apple(apple)
    try:
        bought = await store.record(pid, await read())
    except ApiError as refused:
        if refused.kind in (*_APPLE_REFUSED, ErrorKind.ACCOUNT_TOKEN_MISMATCH):
            _count(APPLE, "invalid", "invalid_signature")
        else:
            _count(APPLE, "paid", "unavailable")
        raise
    except StoreError:
        _count(APPLE, "paid", "unavailable")
        raise
    _count(APPLE, "paid", bought.result)
    return bought


async def apple_notification(apple: AppleStore | None, read: ReadBody) -> Result:
    """An App Store Server Notification V2 (``AppleStore.notify``), 404 while the App Store
    is off."""
    store = _apple(apple)
    try:
        kind, result = await store.notify(await read())
    except ApiError as refused:
        cause = "invalid_signature" if refused.kind in _APPLE_REFUSED else "unavailable"
        _count(APPLE, "invalid", cause)
        raise
    except StoreError:
        _count(APPLE, "invalid", "unavailable")
        raise
    _count(APPLE, kind, result)
    return result
