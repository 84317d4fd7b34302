"""What a completion's stream is written as: the contract between the relay
(``app.completion.relay``) and an API's wire format (each dialect's, ``app.apis``: Chat
Completions chunks, the Responses API's events, Anthropic's Messages events).

The relay decides what is output and when (the cap, where the choice ends, settlement); a
``StreamOutput`` only turns that into bytes, one object per response.
"""

from __future__ import annotations

from typing import Literal, Protocol

import msgspec

from app.upstream.base import Usage
from app.upstream.wire import Delta

Outcome = Literal["completed", "upstream_error", "shutdown"]
"""How a stream that reached its end ended (a client that left gets no end)."""

UPSTREAM_FAILED = (
    "The upstream failed while streaming; you were charged only for the content delivered."
)
SHUT_DOWN = (
    "The server is shutting down; the reply was cut here and you were charged only for the "
    "content delivered. Please retry the request."
)

UNSETTLED = (
    "svc lost its ledger (Redis) while streaming; the reply was cut here. The request is "
    "charged at most once: credits held for it and not settled are returned automatically. "
    "Please retry the request."
)


class SvcMetadata(msgspec.Struct, forbid_unknown_fields=True):
    """The ``svc`` object every API's stream ends with: the alias asked for, what was
    charged and the balance after."""

    requested_model: str
    credits_used: int
    balance_remaining: int


class StreamEnd(msgspec.Struct, frozen=True, kw_only=True):
    """A stream's end, settled: what the last write reports."""

    outcome: Outcome
    credits_used: int
    balance: int
    prompt_tokens: int
    completion_tokens: int
    """Billed: the upstream's counts clamped to the hold, or svc's own."""
    reported: Usage | None
    """The upstream's usage report, for the details it gave."""
    capped: bool
    """Output stopped at the reserved cap (the client's limit, or what the balance affords)."""
    finish_reason: str | None = None
    """The upstream's finish_reason where a delta carried it (``length``, ``tool_calls``,
    ``content_filter``, …); None for plain text's "stop", which comes as its end alone."""
    stop_sequence: str | None = None
    """The stop sequence the upstream said it stopped at, when that is one the request sent."""


# The ending is written once, before settlement, with these in place of the credits charged
# and the balance after (16 digits: no count the scripts accept is that long); settlement's
# numbers then replace them, here for the client and in settle.lua for a replay's record.
CREDITS_MARK = 8_888_888_888_888_881
BALANCE_MARK = 8_888_888_888_888_882
_CREDITS, _BALANCE = b"%d" % CREDITS_MARK, b"%d" % BALANCE_MARK


def ending_parts(template: bytes) -> tuple[bytes, bytes, bytes] | None:
    """A marked ending split around its marks (credits first); None unless each is there
    once, in that order."""
    if template.count(_CREDITS) != 1 or template.count(_BALANCE) != 1:
        return None
    head, _, rest = template.partition(_CREDITS)
    middle, found, tail = rest.partition(_BALANCE)
    return (head, middle, tail) if found else None


def settled_ending(template: bytes, credits_used: int, balance: int) -> bytes:
    """A marked ending with settlement's numbers in place."""
    return template.replace(_CREDITS, b"%d" % credits_used).replace(_BALANCE, b"%d" % balance)


class StreamOutput(Protocol):
    """The bytes of one response's stream."""

    @property
    def id(self) -> str:
        """The response's id, as its chunks or events carry it."""
        ...

    def opening(self, started: Usage | None = None) -> bytes:
        """Written before the first output (with it, in the same write). ``started``: the
        counts the upstream's stream began with (a Messages provider's ``message_start``),
        None when it gave none (a chat upstream reports only at the end)."""
        ...

    def piece(self, piece: str | Delta) -> bytes:
        """One output piece: a token's text, or a delta carrying more than text."""
        ...

    def closing(self, pending: str | Delta | None, *, tool_calls: bool) -> bytes:
        """The end of the output of a completed stream. ``pending`` is the last piece when it
        came in the same read as the upstream's finish; ``tool_calls`` whether the
        upstream called tools."""
        ...

    def ending(self, end: StreamEnd) -> bytes:
        """The last write (made before settlement, with marks for its numbers: called once
        per response, so an output may change its state here)."""
        ...

    def unsettled(self) -> bytes:
        """The last write when the stream could not be settled (Redis did not answer): an
        error the client's SDK raises, and no metadata (what it cost is not known here)."""
        ...
