"""What a completion's stream is written as: the contract between the relay
(``app.chat.completion``) and an API's wire format (Chat Completions chunks, or the
Responses API's events).

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


class StreamOutput(Protocol):
    """The bytes of one response's stream."""

    def opening(self) -> bytes:
        """Written before the first output (with it, in the same write)."""
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
        """The last write, after settlement."""
        ...
