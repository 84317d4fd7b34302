"""``/v1/purchases/google``: Google Play purchases, sent by the companion app (a live key)
and notified by Google (Pub/Sub push, its OIDC token instead of a key)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, post
from litestar.datastructures import ResponseHeader
from litestar.di import Provide

from app.apis.operation import API_KEY, KEY_ERRORS
from app.core.errors import ApiError, ErrorKind, StoreError
from app.core.metrics import METRICS
from app.credits.outcomes import Identity
from app.http.deps import live_only, provide_identity, provide_services
from app.http.headers import NO_STORE
from app.http.openapi import documented, errors
from app.http.purchases import EventReceived
from app.purchases.google import GOOGLE, Claimed, GoogleClaim, GooglePlay
from app.runtime import Services

_LIVE = {
    "ident": Provide(provide_identity),
    "live": Provide(live_only("Purchases belong to live traffic")),
}
_OFF = (
    "Google Play purchases are off: the operator sets SVC_GOOGLE_PACKAGE_NAME, "
    "SVC_GOOGLE_PRODUCTS and SVC_GOOGLE_SERVICE_ACCOUNT_FILE."
)


def _google(services: Services) -> GooglePlay:
    if services.google_play is None:
        raise ApiError(ErrorKind.NOT_FOUND, _OFF)
    return services.google_play


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
        google = _google(services)
        body = await request.body()
        try:
            claimed = await google.claim(live.pid, body)
        except (ApiError, StoreError) as refused:
            if not isinstance(refused, ApiError) or refused.status >= 500:
                METRICS.labelled(METRICS.purchase_events, GOOGLE, "paid", "unavailable").inc()
            raise
        kind = "pending" if claimed.result is None else "paid"
        METRICS.labelled(METRICS.purchase_events, GOOGLE, kind, claimed.result or "ignored").inc()
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
        google = _google(services)
        if google.push is None:
            raise ApiError(
                ErrorKind.NOT_FOUND,
                "Google Play notifications are off: the operator sets "
                "SVC_GOOGLE_PUSH_AUDIENCE and SVC_GOOGLE_PUSH_SERVICE_ACCOUNT.",
            )
        body = await request.body()
        try:
            kind, result = await google.notify(request.headers.get("authorization"), body)
        except (ApiError, StoreError) as refused:
            if isinstance(refused, ApiError) and refused.kind is ErrorKind.INVALID_PUSH_TOKEN:
                METRICS.labelled(
                    METRICS.purchase_events, GOOGLE, "invalid", "invalid_signature"
                ).inc()
            elif not isinstance(refused, ApiError) or refused.status >= 500:
                METRICS.labelled(METRICS.purchase_events, GOOGLE, "ignored", "unavailable").inc()
            raise
        METRICS.labelled(METRICS.purchase_events, GOOGLE, kind, result).inc()
        return EventReceived(received=True, result=result)
