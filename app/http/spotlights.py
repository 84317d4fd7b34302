"""``/v1/spotlights``: intents for the companion app (with a live key of the account), the
account's rewards, and the verified callbacks that reward a view (no API key: a network's
or a verifier's signature). Each callback's whole sequence is its network's module in
``app.spotlights``; these routes only hand it the request and shape the reply."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, MediaType, Request, get, post
from litestar.datastructures import ResponseHeader
from litestar.di import Provide

from app.accounts.rewards import MAX_REWARDS_LIMIT, REWARDS_LIMIT, RewardList, rewards_limit
from app.apis.operation import API_KEY, KEY_ERRORS
from app.core.errors import ErrorKind
from app.credits.outcomes import Identity
from app.http.body_routes import body_route
from app.http.deps import live_only, provide_identity, provide_services
from app.http.headers import NO_STORE
from app.http.openapi import errors
from app.http.queries import whole
from app.runtime import Services
from app.spotlights.admob import reward_callback as reward_admob
from app.spotlights.applovin import reward_callback as reward_applovin
from app.spotlights.intents import IntentIssued
from app.spotlights.levelplay import reward_callback as reward_levelplay
from app.spotlights.rewards import CallbackAnswer
from app.spotlights.signed import SIGNATURE_HEADER, VerifiedView
from app.spotlights.signed import reward_callback as reward_signed

_IDENT = {"ident": Provide(provide_identity)}
_LIVE = {**_IDENT, "live": Provide(live_only("Spotlight intents are live traffic"))}
# what a network's callback (a GET with its query) may be answered besides 200
NETWORK_ERRORS = (
    ErrorKind.INVALID_VALUE,
    ErrorKind.INVALID_SIGNATURE,
    ErrorKind.INVALID_INTENT,
    ErrorKind.INTENT_USED,
    ErrorKind.NOT_FOUND,
    ErrorKind.SERVICE_UNAVAILABLE,
)
RewardsLimit = Annotated[
    str | None,
    whole(
        f"Rewards in the list, newest first (default {REWARDS_LIMIT}).",
        MAX_REWARDS_LIMIT,
        default=REWARDS_LIMIT,
    ),
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
    )
    async def rewards(
        self, services: Services, ident: Identity, limit: RewardsLimit = None
    ) -> RewardList:
        """The account's latest spotlight rewards, newest first (any key of the account):
        each one's network, view, credits and the expiry it gave the earned pool, and
        today's count against the daily limit."""
        wanted = rewards_limit(limit)
        return await services.spotlights.history(ident.pid, wanted, services.clock())

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
        return await reward_signed(
            request.headers.get(SIGNATURE_HEADER),
            await request.body(),
            services.spotlight_secrets,
            services.verified_rewards,
            services.clock(),
        )

    @get("/admob", security=[], responses=errors(*NETWORK_ERRORS))
    async def admob(self, services: Services, request: Request[Any, Any, Any]) -> CallbackAnswer:
        """AdMob's server-side verification callback (register this URL in AdMob): the query
        is verified as Google signs it, its ad unit must be one of ``SVC_ADMOB_AD_UNITS`` (404
        while none is listed) and its ``custom_data`` an intent of the account. 200
        ``rewarded: true``, or ``rewarded: false`` with the reason."""
        return await reward_admob(
            request.scope["query_string"],
            services.settings.admob_ad_units,
            services.admob_keys,
            services.verified_rewards,
        )

    @get("/applovin", security=[], responses=errors(*NETWORK_ERRORS))
    async def applovin(self, services: Services, request: Request[Any, Any, Any]) -> CallbackAnswer:
        """AppLovin MAX's server-to-server rewarded callback (its Server Side Callback URL:
        ``…?event_id={EVENT_ID}&event_key={EVENT_KEY}&ad_unit_id={AD_UNIT_ID}&custom_data=
        {CUSTOM_DATA}``): ``event_key`` must be sha1(event_id + an Event Key of
        ``SVC_APPLOVIN_EVENT_KEYS``; 404 while none is set), the ad unit one of
        ``SVC_APPLOVIN_AD_UNITS`` when that lists any, and ``custom_data`` an intent of the
        account. 200 ``rewarded: true``, or ``rewarded: false`` with the reason."""
        return await reward_applovin(
            request.scope["query_string"],
            services.settings.applovin_event_keys,
            services.settings.applovin_ad_units,
            services.verified_rewards,
        )

    @get(
        "/levelplay",
        security=[],
        media_type=MediaType.TEXT,
        responses=errors(*NETWORK_ERRORS),
    )
    async def levelplay(self, services: Services, request: Request[Any, Any, Any]) -> str:
        """Unity LevelPlay's server-to-server reward callback (``…?appUserId=[USER_ID]&
        eventId=[EVENT_ID]&rewards=[REWARDS]&itemName=[ITEM_NAME]``, with the ``timestamp``,
        ``signature`` and ``custom_intent`` LevelPlay adds): ``signature`` must be
        md5(timestamp + eventId + appUserId + rewards + a private key of
        ``SVC_LEVELPLAY_PRIVATE_KEYS``; 404 while none is set) and ``custom_intent`` an
        intent of the account. 200 ``<eventId>:OK`` (what LevelPlay takes as received) once
        the view is rewarded, was before, or will not be on any retry."""
        acknowledged = await reward_levelplay(
            request.scope["query_string"],
            services.settings.levelplay_private_keys,
            services.verified_rewards,
        )
        return acknowledged.reply
