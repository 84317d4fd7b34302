"""The events a webhook can receive, and the body each delivery carries."""

from __future__ import annotations

import hashlib
from typing import Any, Final

import msgspec

KEY_REVOKED: Final = "key.revoked"
KEY_ROTATED: Final = "key.rotated"
EVENT_TYPES: Final = (KEY_REVOKED, KEY_ROTATED)
"""Every type a webhook may subscribe to."""


class EventBody(msgspec.Struct, kw_only=True):
    """A delivery's JSON body: the same for every attempt of it."""

    id: str  # evt_…: one occurrence; a receiver deduplicates by it
    type: str
    created: int  # unix seconds it happened
    data: msgspec.Raw


def event_id(*occurrence: str | int) -> str:
    """A stable id for one occurrence (its type and what tells it apart), so a write
    retried after a lost answer adds the event once."""
    text = "\0".join(str(part) for part in occurrence)
    return "evt_" + hashlib.sha256(text.encode()).hexdigest()[:32]


def encode_data(data: dict[str, Any]) -> str:
    return msgspec.json.encode(data).decode()
