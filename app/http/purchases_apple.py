"""``/v1/purchases/apple``: App Store purchases, the app's (a live key) and the App Store
Server Notifications V2 (no key: Apple's signature), off (404) until the operator sets
``SVC_APPLE_BUNDLE_ID`` and ``SVC_APPLE_PRODUCTS``."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, post
from litestar.datastructures import ResponseHeader
from litestar.di import Provide

from app.apis.operation import API_KEY, KEY_ERRORS
from app.core.errors import ErrorKind
from app.credits.outcomes import Identity
from app.http.body_routes import body_route
from app.http.deps import live_only, provide_identity, provide_services
from app.http.headers import NO_STORE
from app.http.purchases import EventReceived
from app.purchases.apple_wire import ApplePurchase, NotificationBody, TransactionBody
from app.purchases.received import apple_notification, apple_transaction
from app.runtime import Services

_LIVE = {
    "ident": Provide(provide_identity),
    "live": Provide(live_only("Purchases belong to live traffic")),
}


class ApplePurchasesController(Controller):
    response_headers = [ResponseHeader(name=NO_STORE[0], value=NO_STORE[1])]
    path = "/v1/purchases/apple"
    dependencies = {"services": Provide(provide_services)}
    tags = ["v1"]

    @body_route(
        post,
        "/",
        TransactionBody,
        *KEY_ERRORS,
        ErrorKind.TEST_KEY_FORBIDDEN,
        ErrorKind.INVALID_APPLE_SIGNATURE,
        ErrorKind.ACCOUNT_TOKEN_MISMATCH,
        ErrorKind.NOT_FOUND,
        ErrorKind.SERVICE_UNAVAILABLE,
        status_code=200,
        dependencies=_LIVE,
        security=API_KEY,
    )
    async def transaction(
        self, services: Services, live: Identity, request: Request[Any, Any, Any]
    ) -> ApplePurchase:
        """A StoreKit 2 transaction the app bought (its ``jwsRepresentation``, sent before
        ``finish()``): credited once to the account whose app account token it carries,
        the caller's, whoever sends it and however often (a second send answers the same
        purchase, ``result: "duplicate"``). 400 with nothing written for a transaction the
        App Store did not sign for this app and environment, another account's, a revoked
        one, or one of a product svc does not sell; 503 when it could not be recorded."""
        bought = await apple_transaction(services.apple, live.pid, request.body)
        return bought

    @body_route(
        post,
        "/notifications",
        NotificationBody,
        ErrorKind.INVALID_APPLE_SIGNATURE,
        ErrorKind.NOT_FOUND,
        ErrorKind.SERVICE_UNAVAILABLE,
        status_code=200,
        security=[],
    )
    async def notifications(
        self, services: Services, request: Request[Any, Any, Any]
    ) -> EventReceived:
        """App Store Server Notifications V2 (register this URL in App Store Connect):
        ONE_TIME_CHARGE credits the purchase (when the app did not send it), REFUND takes
        its credits back (debt when spent), REFUND_REVERSED gives them back,
        CONSUMPTION_REQUEST is answered with the share spent (with
        ``SVC_APPLE_CONSUMPTION_CONSENT=true``); each notification once. 200 for every
        notification svc applied, saw before or ignores; 400 with nothing written for one
        Apple did not sign for this app and environment; 503 when it could not be recorded
        or answered (Apple sends it again)."""
        result = await apple_notification(services.apple, request.body)
        return EventReceived(received=True, result=result)
