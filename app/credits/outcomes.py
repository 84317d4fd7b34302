"""What the scripts answer: one status enum for every script and the typed result of each
call. A refusal is a value (``Refusal``) here; the API error it means is the HTTP side's
(``app.keys.refusals``)."""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import NamedTuple

import msgspec

from app.kv.fields import Rates as Rates  # defined with the usage event that records them


class ScriptStatus(IntEnum):
    """The first item of every script's reply (the numbers are the scripts' own)."""

    OK = 0
    KEY_UNKNOWN = 1
    KEY_REVOKED = 2
    ACCOUNT_MISSING = 3
    INSUFFICIENT_CREDITS = 4
    DAILY_CAP_EXCEEDED = 5
    DUPLICATE = 6
    NOT_FOUND = 7
    NOT_EXPIRED = 8
    DAILY_LIMIT = 9
    RATE_LIMITED = 10
    GAVE_UP = 11
    KEY_EXPIRED = 12
    MODEL_NOT_ALLOWED = 13
    IDEMPOTENCY_REUSED = 14
    IDEMPOTENCY_RUNNING = 15
    REPLAY = 16
    UNRECORDED = 17
    INTENT_USED = 18
    ACCOUNT_DISABLED = 19  # the key's account is disabled by an operator
    CEILING_TOO_LOW = 20  # the request's credit ceiling cannot hold its prompt
    DAILY_CAP_HELD = 21  # the key's cap is taken by holds of requests in flight
    ACCOUNT_IN_DEBT = 22  # the key's account owes credits (a refund or a debit found it short)


class Identity(msgspec.Struct, frozen=True):
    """Who a key secret is: immutable for the key's whole life, so workers cache it."""

    pid: str
    kid: str
    environment: str
    shard: int
    lineage: str = ""  # kid of the first key of its rotations; "": it is the first

    @property
    def cap_kid(self) -> str:
        """The kid its daily cap counter and rate limit are kept under (its lineage's)."""
        return self.lineage or self.kid

    def encode(self) -> str:
        """As the digest mapping holds it: ``pid kid environment [lineage]``."""
        base = f"{self.pid} {self.kid} {self.environment}"
        return f"{base} {self.lineage}" if self.lineage else base

    @classmethod
    def decode(cls, text: str, shard_of: Callable[[str], int]) -> Identity:
        pid, kid, environment, *lineage = text.split(" ")
        return cls(pid, kid, environment, shard_of(pid), lineage[0] if lineage else "")


class Hold(msgspec.Struct, kw_only=True):
    """An open reservation, as the request that made it knows it."""

    rid: str
    shard: int
    pid: str
    kid: str
    day: str  # YYYY-MM-DD, UTC day the reservation (and its usage) belongs to
    amount: int
    out_tokens: int
    balance: int
    environment: str  # the key's: live or test
    cap_key: str  # the cap counter the credits are held in (the key lineage's, that day)
    idempotency: str | None = None  # the record of its Idempotency-Key (a Redis key), if any


NO_RATES = Rates(0, 0, 0, 0)
"""What a settle that charges nothing (released, swept) is sent."""


class Tokens(NamedTuple):
    """The tokens a request is billed for: the counts settle is sent (each already clamped
    to what the hold covers: ``app.completion.settlement``) and the parts of them the upstream
    named (cached and cache writes of the prompt, reasoning of the completion)."""

    prompt: int
    completion: int
    cached: int = 0
    cache_writes: int = 0
    reasoning: int = 0


NO_TOKENS = Tokens(0, 0)


class Settlement(msgspec.Struct, frozen=True):
    status: ScriptStatus
    credits_used: int
    balance: int


class Balance(msgspec.Struct, frozen=True):
    earned: int
    earned_exp: int  # unix seconds; 0 while the earned pool is empty
    purchased: int
    debt: int = 0  # credits owed (take_back.lua); the pools are 0 while it is above 0

    @property
    def total(self) -> int:
        return self.earned + self.purchased


class OpenReservations(NamedTuple):
    """The reservations not yet settled, over every shard, and how many of them are past
    their deadline (the sweeper's to refund)."""

    open: int
    past_deadline: int


class Written(NamedTuple):
    """A write that happens once: OK when this call made it, DUPLICATE when it was there
    already (``open_account``, ``put_key``, ``revoke_key``: revoked before), KEY_UNKNOWN when
    the key's record names another account (``revoke_key``, ``update_key``), NOT_FOUND when
    the reservation is gone (``extend``), ACCOUNT_MISSING when Redis has no balance hash of
    the account (``set_low_balance``, ``set_account_status``, ``correct_pools``)."""

    status: ScriptStatus


class KeyAccess(NamedTuple):
    """What a key may do now, as Redis says (read outside the scripts)."""

    status: ScriptStatus  # OK, KEY_UNKNOWN, KEY_REVOKED, KEY_EXPIRED or ACCOUNT_DISABLED
    models: frozenset[str] | None  # the aliases it may use; None: all


class BalanceRead(NamedTuple):
    status: ScriptStatus  # OK, KEY_UNKNOWN, KEY_REVOKED, KEY_EXPIRED, ACCOUNT_MISSING or
    # ACCOUNT_DISABLED
    balance: Balance


class Granted(NamedTuple):
    status: ScriptStatus  # OK, ACCOUNT_MISSING, DUPLICATE or DAILY_LIMIT
    balance: Balance  # the pools after the call
    granted_at: int  # now, or when a DUPLICATE grant was first applied
    paid: int = 0  # of the credits, what went to the account's debt


class TakenBack(NamedTuple):
    """A take-back's outcome (take_back.lua)."""

    status: ScriptStatus  # OK, ACCOUNT_MISSING or DUPLICATE
    balance: Balance  # the pools and the debt after the call
    taken: int  # out of the pools (the first call's, for a DUPLICATE)
    owed: int  # added to the debt: taken + owed = the credits asked
    applied_at: int  # now, or when a DUPLICATE was first applied


class Refusal(NamedTuple):
    """A reserve the script refused: its status and what the error tells the client."""

    status: ScriptStatus
    value: int  # INSUFFICIENT_CREDITS: credits available; DAILY_CAP_EXCEEDED: credits left
    # under the key's cap today; RATE_LIMITED: ms until a start is allowed; CEILING_TOO_LOW:
    # what the prompt alone may cost; else 0
    now: float  # when it was refused (unix seconds): a cap's reset time counts from it
    requested: str = ""  # the model the request asked for
    alias: str = ""  # the alias that would have served it
    ceiling: int = 0  # CEILING_TOO_LOW: the ceiling that held (the request's or its key's)


class Replay(NamedTuple):
    """A reserve with an Idempotency-Key whose request has finished: ``body``, the stream as
    it was first sent, goes out again in place of the request (nothing held or charged)."""

    body: bytes
