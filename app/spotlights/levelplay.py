"""Unity LevelPlay's (formerly ironSource's) server-to-server reward callbacks:
``GET /v1/spotlights/levelplay`` with the query LevelPlay makes of the operator's callback
URL (``appUserId=[USER_ID]&eventId=[EVENT_ID]&rewards=[REWARDS]&itemName=[ITEM_NAME]``),
the ``timestamp`` and ``signature`` it adds, and the app's server parameter ``intent``,
which LevelPlay sends prefixed: ``custom_intent``.

What proves the view is ``signature``: hex ``md5(timestamp + eventId + appUserId + rewards +
the app's private key)``, the values percent-decoded. ``timestamp`` is UTC ``YYYYMMDDHHmm``
and must fall within the intent's life. LevelPlay retries until the answer is 200 with the
body ``<eventId>:OK``: svc answers that for a view it rewarded, rewarded before, or will
not reward whatever is retried (the day's limit, a disabled account, no intent at all:
LevelPlay's own test callback carries none), and the API's errors for anything else.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import NamedTuple

from app.core.errors import ApiError, ErrorKind, invalid_value
from app.core.metrics import METRICS
from app.spotlights.callbacks import (
    digest_matches,
    event_id,
    parameters,
    refusals_counted,
    required,
    signature_refused,
)
from app.spotlights.rewards import CallbackAnswer, VerifiedRewards
from app.spotlights.signed import parse_secrets

NETWORK = "levelplay"
INTENT_PARAMETER = "custom_intent"  # the server parameter "intent", as LevelPlay sends it
TIMESTAMP_FORMAT = "%Y%m%d%H%M"
_TIMESTAMP_DIGITS = 12
_SIGNED = "signature (md5 of timestamp, eventId, appUserId, rewards and the private key)"


class LevelPlayCallback(NamedTuple):
    """The parameters of a LevelPlay callback svc reads."""

    event_id: str
    app_user_id: str
    rewards: str
    timestamp: str
    """``YYYYMMDDHHmm``, UTC, as sent (it is signed as sent)."""
    signature: str
    intent: str
    """The ``intent`` server parameter; empty when the app set none."""

    @property
    def shown_at_ms(self) -> int:
        """``timestamp`` in unix milliseconds (its minute's start)."""
        at = datetime.strptime(self.timestamp, TIMESTAMP_FORMAT).replace(tzinfo=UTC)
        return int(at.timestamp()) * 1000


class Acknowledged(NamedTuple):
    """A callback LevelPlay is told not to send again, and what svc did with it."""

    event_id: str
    answer: CallbackAnswer | None
    """None: the callback carried no intent, and no reward was attempted."""

    @property
    def reply(self) -> str:
        """The body LevelPlay takes as received: ``<eventId>:OK``."""
        return f"{self.event_id}:OK"


def signature(callback: LevelPlayCallback, key: bytes) -> str:
    """What LevelPlay sends as ``signature`` for ``callback`` under the private key
    ``key``."""
    signed = callback.timestamp + callback.event_id + callback.app_user_id + callback.rewards
    return hashlib.md5(signed.encode() + key).hexdigest()


def _timestamp(found: dict[str, str]) -> str:
    text = required(found, "timestamp")
    try:
        if len(text) != _TIMESTAMP_DIGITS or not (text.isascii() and text.isdigit()):
            raise ValueError(text)
        datetime.strptime(text, TIMESTAMP_FORMAT)
    except ValueError:
        raise invalid_value("timestamp", "'timestamp' must be YYYYMMDDHHmm (UTC).") from None
    return text


def parse_callback(raw_query: bytes) -> LevelPlayCallback:
    """A callback's parameters, or the 400 (``invalid_value``) that says which is wrong; a
    query without a signature is the 401 (it proves nothing)."""
    found = parameters(raw_query)
    if not found.get("signature"):
        raise signature_refused("LevelPlay", _SIGNED)
    rewards = required(found, "rewards")
    if not (rewards.isascii() and rewards.isdigit()):
        raise invalid_value("rewards", "'rewards' must be a whole number of at least 0.")
    return LevelPlayCallback(
        event_id=event_id(found, "eventId"),
        app_user_id=required(found, "appUserId"),
        rewards=rewards,
        timestamp=_timestamp(found),
        signature=found["signature"],
        intent=found.get(INTENT_PARAMETER, ""),
    )


def signed(callback: LevelPlayCallback, keys: tuple[bytes, ...]) -> bool:
    """Whether the callback's signature is made with one of ``keys``."""
    return digest_matches(callback.signature, [signature(callback, key) for key in keys])


async def reward_callback(
    raw_query: bytes, keys_setting: str, rewards: VerifiedRewards
) -> Acknowledged:
    """``GET /v1/spotlights/levelplay``: the query read, its signature made with one of the
    private keys of ``keys_setting`` (404 while there is none), then the intent in
    ``custom_intent`` rewarded once per eventId, the view's time within the intent's life.
    A signed callback without an intent is acknowledged and rewards nothing."""
    keys = parse_secrets(keys_setting)
    if not keys:
        raise ApiError(
            ErrorKind.NOT_FOUND,
            "Unity LevelPlay callbacks are off: the operator sets SVC_LEVELPLAY_PRIVATE_KEYS.",
        )
    with refusals_counted(NETWORK):
        callback = parse_callback(raw_query)
        if not signed(callback, keys):
            raise signature_refused("LevelPlay", _SIGNED)
    if not callback.intent:
        # nothing to reward, now or on a retry: LevelPlay's test when the URL is saved, or
        # an app that set no intent
        METRICS.labelled(METRICS.spotlight_callbacks, NETWORK, "invalid_intent").inc()
        return Acknowledged(callback.event_id, None)
    answer = await rewards.reward(
        NETWORK, callback.event_id, callback.intent, shown_at_ms=callback.shown_at_ms
    )
    return Acknowledged(callback.event_id, answer)
