"""``/v1/purchases``: the stores' own notices of purchases, refunds and disputes, verified
by each store's signature (no API key): Stripe's webhook events first."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from litestar import Controller, Request, get, post
from litestar.datastructures import ResponseHeader
from litestar.di import Provide

from app.apis.operation import API_KEY, KEY_ERRORS
from app.core.errors import ErrorKind
from app.credits.outcomes import Identity
from app.http.deps import live_only, provide_identity, provide_services
from app.http.headers import NO_STORE
from app.http.openapi import errors
from app.purchases.account_token import AccountToken
from app.purchases.purchases import Result
from app.purchases.received import stripe_event
from app.purchases.stripe_signature import SIGNATURE_HEADER
from app.runtime import Services

_LIVE = {
    "ident": Provide(provide_identity),
    "live": Provide(live_only("Purchases belong to live traffic")),
}


class EventReceived(msgspec.Struct):
    """What svc did with a store's event: applied, duplicate (applied before), kept (its
    purchase not seen yet), ignored (nothing to do) or unmatched (kept for an operator)."""

    received: bool
    result: Result
    object: Literal["purchase_event"] = "purchase_event"


class PurchasesController(Controller):
    response_headers = [ResponseHeader(name=NO_STORE[0], value=NO_STORE[1])]
    path = "/v1/purchases"
    dependencies = {"services": Provide(provide_services)}
    tags = ["v1"]

    @get(
        "/account-token",
        dependencies=_LIVE,
        security=API_KEY,
        responses=errors(*KEY_ERRORS, ErrorKind.TEST_KEY_FORBIDDEN),
    )
    async def account_token(self, services: Services, live: Identity) -> AccountToken:
        """The account's app account token, for the companion app to hand the store with a
        purchase (StoreKit's ``appAccountToken``, Play Billing's ``obfuscatedAccountId``):
        a UUID, the same on every call, that names the account to svc alone. A store
        purchase is credited only to the account whose token it carries."""
        return await services.account_tokens.issue(live.pid)

    @post(
        "/stripe",
        security=[],
        status_code=200,
        responses=errors(
            ErrorKind.INVALID_STRIPE_SIGNATURE,
            ErrorKind.INVALID_VALUE,
            ErrorKind.NOT_FOUND,
            ErrorKind.SERVICE_UNAVAILABLE,
        ),
    )
    async def stripe(self, services: Services, request: Request[Any, Any, Any]) -> EventReceived:
        """Stripe's webhook events (register this URL as a webhook endpoint; its signing
        secret in ``SVC_STRIPE_WEBHOOK_SECRETS``, 404 while none is set): a paid Checkout
        Session grants its ``metadata.svc_credits`` to the account its
        ``client_reference_id`` names, once; refunds and disputes take them back. 200 for
        every event svc applied, saw before, keeps or ignores; 400 with nothing written for
        a bad signature or body; 503 when it could not be recorded (Stripe retries)."""
        signature = request.headers.get(SIGNATURE_HEADER)
        result = await stripe_event(
            services.purchases, services.stripe_secrets, request.body, signature, services.clock
        )
        return EventReceived(received=True, result=result)
