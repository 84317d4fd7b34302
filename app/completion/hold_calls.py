"""What completions call of the ledger (``HoldCalls``): the requests' ``app.credits`` holds,
called as they are, or through a wrapper that records each call (traces on)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from app.credits.outcomes import Hold, Refusal, Replay, Settlement, Written


class HoldCalls(Protocol):
    """The ledger calls a completion makes, with the arguments of ``app.credits.holds.Holds``':
    its own methods, or with traces on a wrapper's that records each
    (``app.completion.traced.TracedHolds``)."""

    @property
    def reserve(self) -> Callable[..., Awaitable[Hold | Refusal | Replay]]: ...

    @property
    def settle(self) -> Callable[..., Awaitable[Settlement]]: ...

    @property
    def extend(self) -> Callable[[Hold, float], Awaitable[Written]]: ...

    @property
    def release_unanswered(self) -> Callable[..., Awaitable[Settlement]]: ...
