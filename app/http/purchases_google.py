"""``/v1/purchases/google``: Google Play purchases, sent by the companion app (a live key)
and notified by Google (Pub/Sub push, its OIDC token instead of a key)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, post
from litestar.datastructures import ResponseHeader
from litestar.di import Provide

from app.apis.operation import API_KEY, KEY_ERRORS
from app.core.errors import ErrorKind
from app.credits.outcomes import Identity
from app.http.deps import live_only, provide_identity, provide_services
from app.http.headers import NO_STORE
from app.http.openapi import documented, errors
from app.http.purchases import EventReceived
from app.purchases.google import Claimed, GoogleClaim
from app.purchases.received import google_claim, google_notification
from app.runtime import Services

_LIVE = {
    "ident": Provide(provide_identity),
    "live": Provide(live_only("Purchases belong to live traffic")),
}


class GooglePurchasesController(Controller):
    response_headers = [ResponseHeader(name=NO_STORE[0], value=NO_STORE[1])]
    path = "/v1/purchases/google"
    dependencies = {"services": Provide(provide_services)}
    tags = ["v1"]

    @post(
        "/",
        dependencies=_LIVE,
        security=API_KEY,
        status_code=200,
        operation_class=documented(body=GoogleClaim),
        responses=errors(
            *KEY_ERRORS,
            ErrorKind.TEST_KEY_FORBIDDEN,
            ErrorKind.INVALID_VALUE,
            ErrorKind.INVALID_GOOGLE_PURCHASE,
            ErrorKind.ACCOUNT_TOKEN_MISMATCH,
            ErrorKind.NOT_FOUND,
            ErrorKind.SERVICE_UNAVAILABLE,
        ),
    )
    async def purchase(
        self, services: Services, live: Identity, request: Request[Any, Any, Any]
    ) -> Response[Claimed]:
        """A Play purchase the app was given (``product_id``, ``purchase_token``): svc asks
        Google for it and credits it once to the account whose app account token it
        carries (``obfuscatedAccountId``: the caller's, else 400), then consumes it. 200
        credited (``result``: applied, or duplicate when it was before); 202 ``pending``
        with nothing written (send it again once Play says it is purchased); 400 for a
        purchase that can never be credited; 503 when Google or svc's backends cannot be
        reached (send it again)."""
        claimed = await google_claim(services.google_play, live.pid, request.body)
        return Response(claimed, status_code=202 if claimed.result is None else 200)

    @post(
        "/notifications",
        security=[],
        status_code=200,
        responses=errors(
            ErrorKind.INVALID_PUSH_TOKEN,
            ErrorKind.INVALID_VALUE,
            ErrorKind.NOT_FOUND,
            ErrorKind.SERVICE_UNAVAILABLE,
        ),
    )
    async def notifications(
        self, services: Services, request: Request[Any, Any, Any]
    ) -> EventReceived:
        """Google Play's Real-time developer notifications, pushed by a Pub/Sub push
        subscription with an OIDC token (``SVC_GOOGLE_PUSH_AUDIENCE``,
        ``SVC_GOOGLE_PUSH_SERVICE_ACCOUNT``; 404 while unset), once per message id: a
        one-time product purchased is fetched from Google and credited, a voided one taken
        back (debt when spent). 200 for every notification applied, seen before or ignored;
        401 for a push token svc cannot trust and 400 for a body that is not a push, both
        with nothing written; 503 when it could not be recorded (Pub/Sub pushes it again)."""
        authorization = request.headers.get("authorization")
        result = await google_notification(services.google_play, authorization, request.body)
        return EventReceived(received=True, result=result)
