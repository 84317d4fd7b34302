"""The entries of a shard's events stream ``<p>:{sN}:events``, named and parsed once: the
fields the scripts in ``app/credits/lua`` write (``EventField``; the scripts name them as
literals, their headers say which) and the event each entry records (``parse_event``: a
usage, expiry, low-balance or cap event), read by the flusher, receipts, inspect and
rebuild-redis."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from app.kv.fields import API_CHAT, NOTHING_SERVED, Served
from app.kv.layout import as_text


class EventField:
    """The fields of an entry of a shard's events stream ``<p>:{sN}:events``. ``settle.lua``
    writes the usage event (no ``KIND``: the hot path's entries stay small); the scripts that
    meet an expired earned pool (``lib/earned.lua``) an ``EXPIRE`` one; settle a ``LOW`` one;
    reserve a ``CAP`` one. The scripts name them as literals: their headers say which."""

    KIND: Final = "kind"  # absent: a usage event; else KIND_EXPIRE | KIND_LOW | KIND_CAP
    RESERVATION: Final = "rid"
    ACCOUNT: Final = "acct"
    KEY: Final = "kid"
    ENVIRONMENT: Final = "env"
    ALIAS: Final = "alias"  # the alias that served it
    REQUESTED: Final = "requested"  # the model the client asked for
    DAY: Final = "day"  # YYYY-MM-DD, the reservation's UTC day
    PROMPT_TOKENS: Final = "prompt_tokens"
    COMPLETION_TOKENS: Final = "completion_tokens"
    CREDITS: Final = "credits"  # usage: charged; expire: what lapsed
    EARNED: Final = "earned"  # the part of CREDITS paid from the earned pool
    OUTCOME: Final = "outcome"
    TS: Final = "ts"  # unix seconds it happened
    API: Final = "api"  # absent on events from before it existed: API_CHAT
    SERVED: Final = "served"  # Served.text()
    # usage, each only when not 0: the parts of PROMPT_TOKENS the upstream read from its
    # cache and wrote to it, and of COMPLETION_TOKENS spent reasoning
    CACHED_TOKENS: Final = "cached_tokens"
    CACHE_WRITE_TOKENS: Final = "cache_write_tokens"
    REASONING_TOKENS: Final = "reasoning_tokens"
    FAILOVERS: Final = "failovers"  # usage, only when not 0: upstreams failed over from
    BALANCE: Final = "balance"  # low: the balance left
    LOW: Final = "low"  # low: the account's threshold
    LEVEL: Final = "level"  # cap: 50, 80 or 100 (%)
    CAP: Final = "cap"  # cap: the key's daily cap
    SPENT: Final = "spent"  # cap: the counter after the reserve
    COUNTER: Final = "counter"  # cap: the cap counter's key name


KIND_EXPIRE: Final = "expire"
KIND_LOW: Final = "low"
KIND_CAP: Final = "cap"
KIND_MARK: Final = "mark"
"""An entry ``rebuild-redis`` writes (and trims) so new ids land after a shard's cursor."""


class UsageEvent(msgspec.Struct, frozen=True):
    """One settled request, as ``settle.lua`` wrote it."""

    id: str
    account_pid: str
    kid: str
    environment: str
    alias: str
    day: str
    prompt_tokens: int
    completion_tokens: int
    credits: int
    earned_credits: int = 0  # events written before the field existed count as 0
    api: str = API_CHAT  # events written before the field existed were chat completions
    # what the request's activity row tells (an event written before a field existed:
    # that much is not known, and the row says so)
    reservation_id: str = ""
    requested: str = ""
    outcome: str = ""
    ts: int = 0  # unix seconds it settled
    served: Served = NOTHING_SERVED
    cached_tokens: int = 0  # of prompt_tokens, read from the upstream's cache
    cache_write_tokens: int = 0  # of prompt_tokens, written to it (reported apart)
    reasoning_tokens: int = 0  # of completion_tokens
    failovers: int = 0  # upstreams that failed before their first piece, then the next one


class ExpiryEvent(msgspec.Struct, frozen=True):
    """Earned credits that lapsed, as a script wrote it (``kind expire``)."""

    id: str
    account_pid: str
    credits: int
    ts: int


class LowBalanceEvent(msgspec.Struct, frozen=True):
    """A settle left the balance below the account's threshold (``kind low``)."""

    id: str
    account_pid: str
    balance: int
    low: int
    ts: int


class CapEvent(msgspec.Struct, frozen=True):
    """A reserve took a key's cap counter past 50, 80 or 100 % of its cap (``kind cap``)."""

    id: str
    account_pid: str
    kid: str
    level: int
    cap: int
    spent: int
    counter: str  # the cap counter's key name: its lineage and day
    ts: int


StreamEvent = UsageEvent | ExpiryEvent | LowBalanceEvent | CapEvent


def parse_event(entry_id: Any, fields: Any) -> StreamEvent:
    """One stream entry as the event it records; an entry without ``kind`` is a usage
    event (settle writes no kind, to keep the hot path's entries small)."""
    if isinstance(entry_id, bytes):
        # svc's clients answer bytes: decoded in one comprehension, not field by field
        # through as_text (the flusher parses every event, a quarter of its CPU once)
        f = {k.decode(): v.decode() for k, v in fields.items()}
        event_id = entry_id.decode()
    else:
        f = {as_text(k): as_text(v) for k, v in fields.items()}
        event_id = as_text(entry_id)
    kind = f.get(EventField.KIND)
    if kind == KIND_EXPIRE:
        return ExpiryEvent(
            id=event_id,
            account_pid=f[EventField.ACCOUNT],
            credits=int(f[EventField.CREDITS]),
            ts=int(f[EventField.TS]),
        )
    if kind == KIND_LOW:
        return LowBalanceEvent(
            id=event_id,
            account_pid=f[EventField.ACCOUNT],
            balance=int(f[EventField.BALANCE]),
            low=int(f[EventField.LOW]),
            ts=int(f[EventField.TS]),
        )
    if kind == KIND_CAP:
        return CapEvent(
            id=event_id,
            account_pid=f[EventField.ACCOUNT],
            kid=f[EventField.KEY],
            level=int(f[EventField.LEVEL]),
            cap=int(f[EventField.CAP]),
            spent=int(f[EventField.SPENT]),
            counter=f[EventField.COUNTER],
            ts=int(f[EventField.TS]),
        )
    return UsageEvent(
        id=event_id,
        account_pid=f[EventField.ACCOUNT],
        kid=f[EventField.KEY],
        environment=f[EventField.ENVIRONMENT],
        alias=f[EventField.ALIAS],
        day=f[EventField.DAY],
        prompt_tokens=int(f[EventField.PROMPT_TOKENS]),
        completion_tokens=int(f[EventField.COMPLETION_TOKENS]),
        credits=int(f[EventField.CREDITS]),
        earned_credits=int(f.get(EventField.EARNED, 0)),
        api=f.get(EventField.API, API_CHAT),
        reservation_id=f.get(EventField.RESERVATION, ""),
        requested=f.get(EventField.REQUESTED, ""),
        outcome=f.get(EventField.OUTCOME, ""),
        ts=int(f.get(EventField.TS, 0)),
        served=Served.parse(f.get(EventField.SERVED, "")),
        cached_tokens=int(f.get(EventField.CACHED_TOKENS, 0)),
        cache_write_tokens=int(f.get(EventField.CACHE_WRITE_TOKENS, 0)),
        reasoning_tokens=int(f.get(EventField.REASONING_TOKENS, 0)),
        failovers=int(f.get(EventField.FAILOVERS, 0)),
    )
