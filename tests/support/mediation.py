"""AppLovin MAX's and Unity LevelPlay's rewarded callbacks as each network makes them,
signed here by the networks' own schemes (never by svc's code), for the unit and e2e
tests to send."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime
from urllib.parse import urlencode

MAX_AD_UNIT = "9ad0816ac071552a"  # AppLovin's example of a MAX ad unit id


def applovin_query(
    intent: str, event: str, key: str, *, hash_name: str = "event_key", **changed: str
) -> bytes:
    """A callback as MAX sends it for issue 50's URL template, ``hash_name`` (``event_key``
    or ``event_token``) = hex sha1(event id + Event Key ``key``); ``changed`` replaces
    parameters after the hash is made."""
    values = {
        "event_id": event,
        hash_name: hashlib.sha1((event + key).encode()).hexdigest(),
        "user_id": "player-1",
        "amount": "1",
        "currency": "Spotlight",
        "ad_unit_id": MAX_AD_UNIT,
        "custom_data": intent,
    }
    values.update(changed)
    return urlencode(values).encode()


def stamp(at: float) -> str:
    """LevelPlay's ``timestamp`` for the unix time ``at``: ``YYYYMMDDHHmm``, UTC."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y%m%d%H%M")


def levelplay_query(
    intent: str | None, event: str, key: str, *, at: float | None = None, **changed: str
) -> bytes:
    """A callback as LevelPlay sends it for the guide's URL (the intent, when given, as the
    server parameter ``custom_intent``), ``signature`` = hex md5(timestamp + eventId +
    appUserId + rewards + private key ``key``) at ``at`` (now unless given); ``changed``
    replaces parameters after it is signed."""
    timestamp = stamp(time.time() if at is None else at)
    user, rewards = "player@example.com", "1"
    digest = hashlib.md5((timestamp + event + user + rewards + key).encode()).hexdigest()
    values = {
        "appUserId": user,
        "eventId": event,
        "rewards": rewards,
        "itemName": "Spotlight",
        "timestamp": timestamp,
        "signature": digest,
    }
    if intent is not None:
        values["custom_intent"] = intent
    values.update(changed)
    return urlencode(values).encode()
