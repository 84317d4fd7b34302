"""``/v1/spotlights``: intents for the companion app (with a live key of the account), and
the verified callbacks that reward a view (signed by a verifier, no API key)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get, post
from litestar.datastructures import ResponseHeader
from litestar.di import Provide
from litestar.enums import ParamType
from litestar.openapi.spec import OpenAPIType, Parameter, Schema

from app.accounts.rewards import RewardList, validate_view_id
from app.core.errors import (
    AdMobRejected,
    ApiError,
    ErrorKind,
    KeysUnavailable,
    invalid_value,
    service_unavailable,
)
from app.core.metrics import METRICS
from app.core.validation import decode_json, query_int
from app.credits.outcomes import Identity
from app.http.body_routes import body_route
from app.http.deps import live_only, provide_identity, provide_services
from app.http.headers import NO_STORE
from app.http.openapi import API_KEY, KEY_ERRORS, documented, errors
from app.runtime import Services
from app.spotlights.admob import ad_units, parse_callback, verify
from app.spotlights.intents import IntentIssued
from app.spotlights.rewards import CallbackAnswer
from app.spotlights.signed import SIGNATURE_HEADER, VerifiedView, check, invalid_signature

_IDENT = {"ident": Provide(provide_identity)}
_LIVE = {**_IDENT, "live": Provide(live_only("Spotlight intents are live traffic"))}
REWARDS_LIMIT = 20  # rewards listed unless told: four days' worth at the default limit
MAX_REWARDS_LIMIT = 100
REWARDS_PARAMS = [
    Parameter(
        name="limit",
        param_in=ParamType.QUERY,
        required=False,
        description=f"Rewards in the list, newest first (default {REWARDS_LIMIT}).",
        schema=Schema(
            type=OpenAPIType.INTEGER, minimum=1, maximum=MAX_REWARDS_LIMIT, default=REWARDS_LIMIT
        ),
    )
]


class SpotlightController(Controller):
    response_headers = [ResponseHeader(name=NO_STORE[0], value=NO_STORE[1])]
    path = "/v1/spotlights"
    dependencies = {"services": Provide(provide_services)}
    tags = ["v1"]

    @post(
        "/intents",
        dependencies=_LIVE,
        security=API_KEY,
        responses=errors(*KEY_ERRORS, ErrorKind.TEST_KEY_FORBIDDEN),
    )
    async def intent(self, services: Services, live: Identity) -> IntentIssued:
        """An intent for one rewarded spotlight view (201): pass its ``token`` to the ad
        network as the verification's custom data, or to your own verifier. It lives an
        hour and rewards one view."""
        return services.intents.issue(live.pid, services.clock())

    @get(
        "/rewards",
        dependencies=_IDENT,
        security=API_KEY,
        responses=errors(*KEY_ERRORS, ErrorKind.INVALID_VALUE),
        operation_class=documented(parameters=REWARDS_PARAMS),
    )
    async def rewards(
        self, services: Services, ident: Identity, request: Request[Any, Any, Any]
    ) -> RewardList:
        """The account's latest spotlight rewards, newest first (any key of the account):
        each one's network, view, credits and the expiry it gave the earned pool, and
        today's count against the daily limit."""
        raw = request.query_params.get("limit")
        limit = query_int(raw, "limit", low=1, high=MAX_REWARDS_LIMIT, default=REWARDS_LIMIT)
        return await services.spotlights.history(ident.pid, limit, services.clock())

    @body_route(
        post,
        "/verified",
        VerifiedView,
        ErrorKind.INVALID_SIGNATURE,
        ErrorKind.INVALID_INTENT,
        ErrorKind.INTENT_USED,
        ErrorKind.NOT_FOUND,
        ErrorKind.SERVICE_UNAVAILABLE,
        status_code=200,
        security=[],
    )
    async def verified(self, services: Services, request: Request[Any, Any, Any]) -> CallbackAnswer:
        """Reward a view a verifier proved (``svc-signature``, signed with one of
        ``SVC_SPOTLIGHT_SECRETS``): 200 ``rewarded: true``, or ``rewarded: false`` with the
        reason when it was rewarded before or the day's limit is reached."""
        if not services.spotlight_secrets:
            raise ApiError(
                ErrorKind.NOT_FOUND,
                "Signed spotlight callbacks are off: the operator sets SVC_SPOTLIGHT_SECRETS.",
            )
        body = await request.body()
        try:
            check(
                request.headers.get(SIGNATURE_HEADER),
                body,
                services.spotlight_secrets,
                services.clock(),
            )
        except ApiError:
            METRICS.labelled(METRICS.spotlight_callbacks, "signed", "invalid_signature").inc()
            raise
        view = decode_json(body, VerifiedView)
        validate_view_id(view.view_id)
        return await services.verified_rewards.reward("signed", view.view_id, view.intent)

    @get(
        "/admob",
        security=[],
        responses=errors(
            ErrorKind.INVALID_VALUE,
            ErrorKind.INVALID_SIGNATURE,
            ErrorKind.INVALID_INTENT,
            ErrorKind.INTENT_USED,
            ErrorKind.NOT_FOUND,
            ErrorKind.SERVICE_UNAVAILABLE,
        ),
    )
    async def admob(self, services: Services, request: Request[Any, Any, Any]) -> CallbackAnswer:
        """AdMob's server-side verification callback (register this URL in AdMob): the query
        is verified as Google signs it, its ad unit must be one of ``SVC_ADMOB_AD_UNITS`` (404
        while none is listed) and its ``custom_data`` an intent of the account. 200
        ``rewarded: true``, or ``rewarded: false`` with the reason."""
        allowed = ad_units(services.settings.admob_ad_units)
        if not allowed:
            raise ApiError(
                ErrorKind.NOT_FOUND,
                "AdMob callbacks are off: the operator lists the ad units in SVC_ADMOB_AD_UNITS.",
            )
        try:
            return await self._admob(services, request.scope["query_string"], allowed)
        except ApiError as error:
            if error.kind in (ErrorKind.INVALID_VALUE, ErrorKind.INVALID_SIGNATURE):
                result = "invalid_signature"
                METRICS.labelled(METRICS.spotlight_callbacks, "admob", result).inc()
            raise

    @staticmethod
    async def _admob(services: Services, query: bytes, allowed: frozenset[str]) -> CallbackAnswer:
        try:
            callback = parse_callback(query)
        except AdMobRejected as exc:
            raise invalid_value("signature", f"Not an AdMob callback: {exc.reason}.") from None
        if callback.ad_unit not in allowed:
            raise invalid_value("ad_unit", "This ad unit does not reward here.")
        try:
            key = await services.admob_keys.key(callback.key_id)
        except KeysUnavailable:
            METRICS.labelled(METRICS.spotlight_callbacks, "admob", "unavailable").inc()
            raise service_unavailable() from None
        if key is None or not verify(callback, key):
            raise invalid_signature()
        return await services.verified_rewards.reward(
            "admob",
            callback.transaction_id,
            callback.custom_data,
            shown_at_ms=callback.timestamp_ms,
        )
