"""Rewards for views proven by a verifier: the intent the view was shown for is opened, and
one script call grants the earned credits once per transaction, consumes the intent and
counts the day's limit (``Spotlights.grant_view``).

What a network retries matters: a view already rewarded, one past the day's limit, or one
of an account disabled since its intent was issued (the script reads the status, so a
disable racing the callback counts too) answers 200 with ``rewarded: false`` and a reason
(a network retries anything else); a bad
signature or intent is a 400/401 and writes nothing; 503 only when the reward could not be
attempted.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from app.accounts.rewards import Spotlights
from app.core.clock import iso_utc
from app.core.errors import ApiError, ErrorKind, service_unavailable
from app.core.metrics import METRICS
from app.credits.outcomes import ScriptStatus
from app.spotlights.intents import INTENT_TTL_S, Intent, Intents, invalid_intent
from app.store import Store

_NOT_REWARDED = {
    ScriptStatus.DUPLICATE: "duplicate",
    ScriptStatus.DAILY_LIMIT: "daily_limit",
    # disabled after the intent was issued: a 200, so the network stops retrying
    ScriptStatus.ACCOUNT_DISABLED: "account_disabled",
}


MAX_AHEAD_MS = 300_000  # a network's clock may run this far ahead of svc's


def shown_within(intent: Intent, shown_at_ms: int, now: float) -> bool:
    """Whether a view shown at ``shown_at_ms`` falls in the intent's life and not in svc's
    future (each with the clocks' leeway)."""
    issued_ms = (intent.expires_at - INTENT_TTL_S) * 1000
    earliest = issued_ms - MAX_AHEAD_MS  # the same leeway for a network clock behind svc's
    return earliest <= shown_at_ms <= min(intent.expires_at * 1000, now * 1000 + MAX_AHEAD_MS)


class CallbackAnswer(msgspec.Struct, omit_defaults=True):
    """The answer to a verified callback."""

    object: str
    rewarded: bool
    reason: str | None = None  # why not: duplicate | daily_limit | account_disabled
    credits: int | None = None
    earned_expires_at: str | None = None


class VerifiedRewards:
    """Rewards views a verifier proved, each bound to an intent of its account."""

    def __init__(
        self,
        spotlights: Spotlights,
        intents: Intents,
        store: Store,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spotlights = spotlights
        self.intents = intents
        self.store = store
        self.clock = clock

    async def reward(
        self, network: str, transaction_id: str, token: str, *, shown_at_ms: int | None = None
    ) -> CallbackAnswer:
        """Reward the view ``transaction_id`` of ``network`` (its grant id:
        ``<network>:<pid>:<transaction_id>``) for the intent ``token``, once. ``shown_at_ms``: when
        the network says the view was (unix ms): within the intent's life, and at most 5
        minutes past svc's clock."""
        try:
            answer = await self._reward(network, transaction_id, token, shown_at_ms)
        except ApiError as error:
            result = {ErrorKind.INTENT_USED: "intent_used"}.get(error.kind, "invalid_intent")
            if error.kind is ErrorKind.SERVICE_UNAVAILABLE:
                result = "unavailable"
            METRICS.labelled(METRICS.spotlight_callbacks, network, result).inc()
            raise
        result = "rewarded" if answer.rewarded else answer.reason or "duplicate"
        METRICS.labelled(METRICS.spotlight_callbacks, network, result).inc()
        return answer

    async def _reward(
        self, network: str, transaction_id: str, token: str, shown_at_ms: int | None
    ) -> CallbackAnswer:
        now = self.clock()
        intent = self.intents.open(token, now)
        if shown_at_ms is not None and not shown_within(intent, shown_at_ms, now):
            raise invalid_intent("was not live when the view was shown")
        account = await self.store.get_account(intent.pid)
        if account is None:
            raise invalid_intent("names no account")
        # the account in the id too: Redis dedupes in the account's slot, and a verifier's
        # view ids need not be unique across accounts (each view is bound to its intent)
        grant_id = f"{network}:{intent.pid}:{transaction_id}"
        status, record = await self.spotlights.grant_view(
            account,
            grant_id,
            transaction_id,
            now,
            intent=(intent.intent_id, intent.life_left(now)),
        )
        if status is ScriptStatus.OK and record is not None:
            return CallbackAnswer(
                object="spotlight.callback",
                rewarded=True,
                credits=record.credits,
                earned_expires_at=iso_utc(self.spotlights.expires_at(record)),
            )
        reason = _NOT_REWARDED.get(status)
        if reason is not None and (status is not ScriptStatus.DUPLICATE or record is not None):
            return CallbackAnswer(object="spotlight.callback", rewarded=False, reason=reason)
        if status is ScriptStatus.INTENT_USED:
            raise ApiError(
                ErrorKind.INTENT_USED,
                "The spotlight intent was already used by another view.",
                param="intent",
            )
        raise service_unavailable()
