"""AppLovin MAX's server-to-server rewarded callbacks: ``GET /v1/spotlights/applovin`` with
the query the operator's callback URL template makes of MAX's macros::

    event_id={EVENT_ID}&event_key={EVENT_KEY}&user_id={USER_ID}&amount={AMOUNT}
    &currency={CURRENCY}&ad_unit_id={AD_UNIT_ID}&custom_data={CUSTOM_DATA}

MAX sends one for every rewarded view it mediates, whatever network filled it. What proves
it is ``{EVENT_KEY}``: hex ``sha1(event id + the account's Event Key)``, so only AppLovin
(and whoever holds the Event Key) can make it. AppLovin's macro table defines
``{EVENT_TOKEN}`` the same way, so a template may send it as ``event_token`` instead.
Nothing else in the query is signed: ``custom_data`` carries the intent (sealed by svc, so
it cannot be forged either), and ``amount``, ``currency`` and ``user_id`` are not read (svc
grants its own reward).
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from app.core.errors import ApiError, ErrorKind, invalid_value
from app.spotlights.callbacks import (
    digest_matches,
    event_id,
    parameters,
    refusals_counted,
    signature_refused,
)
from app.spotlights.rewards import CallbackAnswer, VerifiedRewards
from app.spotlights.signed import parse_secrets

NETWORK = "applovin"
HASH_PARAMETERS = ("event_key", "event_token")  # {EVENT_KEY}, {EVENT_TOKEN}: one scheme


class AppLovinCallback(NamedTuple):
    """The parameters of a MAX callback svc reads."""

    event_id: str
    hashes: tuple[str, ...]
    """``event_key`` and/or ``event_token``, as sent (each must match)."""
    custom_data: str
    """The intent the app set with ``setCustomData``; empty when it set none."""
    ad_unit_id: str


def event_key(event: str, key: bytes) -> str:
    """What MAX sends as ``{EVENT_KEY}`` for the event ``event``: hex sha1 of the event id
    followed by the account's Event Key."""
    return hashlib.sha1(event.encode() + key).hexdigest()


def parse_callback(raw_query: bytes) -> AppLovinCallback:
    """A callback's parameters, or the 400 (``invalid_value``) that says which is wrong; a
    query without a hash is the 401 (it proves nothing)."""
    found = parameters(raw_query)
    hashes = tuple(found[name] for name in HASH_PARAMETERS if found.get(name))
    if not hashes:
        raise signature_refused("AppLovin", "event_key (sha1 of event_id and the Event Key)")
    return AppLovinCallback(
        event_id=event_id(found, "event_id"),
        hashes=hashes,
        custom_data=found.get("custom_data", ""),
        ad_unit_id=found.get("ad_unit_id", ""),
    )


def signed(callback: AppLovinCallback, keys: tuple[bytes, ...]) -> bool:
    """Whether every hash the callback sent is its event id's under one of ``keys``."""
    expected = [event_key(callback.event_id, key) for key in keys]
    return all(digest_matches(given, expected) for given in callback.hashes)


def listed(setting: str) -> frozenset[str]:
    """The ad unit ids ``SVC_APPLOVIN_AD_UNITS`` lists (comma-separated); empty: any."""
    return frozenset(part.strip() for part in setting.split(",") if part.strip())


async def reward_callback(
    raw_query: bytes, keys_setting: str, ad_units_setting: str, rewards: VerifiedRewards
) -> CallbackAnswer:
    """``GET /v1/spotlights/applovin``: the query read, its ad unit one of
    ``ad_units_setting`` when that lists any, its ``event_key`` made with one of the Event
    Keys of ``keys_setting`` (404 while there is none), then the intent in ``custom_data``
    rewarded once per event id. MAX retries only a callback that timed out: every answer is
    final, and a refused one is never retried."""
    keys = parse_secrets(keys_setting)
    if not keys:
        raise ApiError(
            ErrorKind.NOT_FOUND,
            "AppLovin MAX callbacks are off: the operator sets SVC_APPLOVIN_EVENT_KEYS.",
        )
    allowed = listed(ad_units_setting)
    with refusals_counted(NETWORK):
        callback = parse_callback(raw_query)
        if allowed and callback.ad_unit_id not in allowed:
            raise invalid_value("ad_unit_id", "This ad unit does not reward here.")
        if not signed(callback, keys):
            raise signature_refused("AppLovin", "event_key (sha1 of event_id and the Event Key)")
    return await rewards.reward(NETWORK, callback.event_id, callback.custom_data)
