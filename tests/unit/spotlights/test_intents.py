"""Spotlight intents: sealed, single-use tokens bound to an account (app.spotlights.intents)."""

from __future__ import annotations

import base64

import pytest

from app.core.errors import ApiError, ErrorKind
from app.spotlights.intents import INTENT_TTL_S, TOKEN_PREFIX, Intents

NOW = 1_790_000_000.0
PID = "acct_0123456789abcdef"


def _refused(intents: Intents, token: str, now: float = NOW) -> ApiError:
    with pytest.raises(ApiError) as refused:
        intents.open(token, now)
    assert (refused.value.kind, refused.value.status) == (ErrorKind.INVALID_INTENT, 400)
    assert refused.value.param == "intent"
    return refused.value


def test_an_intent_opens_to_its_account_until_it_expires() -> None:
    intents = Intents(b"pepper")
    issued = intents.issue(PID, NOW)
    assert issued.object == "spotlight.intent"
    assert issued.token.startswith(TOKEN_PREFIX)
    assert issued.expires_at == int(NOW) + INTENT_TTL_S
    intent = intents.open(issued.token, NOW + INTENT_TTL_S - 1)
    assert (intent.pid, intent.expires_at) == (PID, issued.expires_at)
    assert intent.life_left(NOW) == INTENT_TTL_S
    assert "has expired" in _refused(intents, issued.token, NOW + INTENT_TTL_S).message


def test_each_intent_is_its_own() -> None:
    intents = Intents(b"pepper")
    first, second = intents.issue(PID, NOW), intents.issue(PID, NOW)
    assert first.token != second.token
    assert intents.open(first.token, NOW).intent_id != intents.open(second.token, NOW).intent_id


def test_a_token_names_nothing_in_clear() -> None:
    token = Intents(b"pepper").issue(PID, NOW).token
    raw = base64.urlsafe_b64decode(token[len(TOKEN_PREFIX) :] + "==")
    assert PID not in token
    assert PID.encode() not in raw
    assert b"acct_" not in raw


def test_a_changed_or_forged_token_is_refused() -> None:
    intents = Intents(b"pepper")
    token = intents.issue(PID, NOW).token
    body = token[len(TOKEN_PREFIX) :]
    for at in range(0, len(body), 3):
        changed = body[:at] + ("A" if body[at] != "A" else "B") + body[at + 1 :]
        _refused(intents, TOKEN_PREFIX + changed)
    _refused(Intents(b"another pepper"), token)  # only svc's pepper makes one
    _refused(intents, token[len(TOKEN_PREFIX) :])  # no prefix
    _refused(intents, TOKEN_PREFIX)
    _refused(intents, TOKEN_PREFIX + "not base64 !")
    _refused(intents, TOKEN_PREFIX + "A" * 600)
    _refused(intents, token[:-4])  # cut short
