"""What watches completions from outside the completion engine: told of a request before its
reserve, of each upstream attempt, of the settlement and of the relay's end, never of a chunk.
Traces are its one watcher (``app.completion.traced``); with traces off a service has none,
and a completion asks nothing of it beyond seeing there is none."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from app.completion.request import CompletionRequest
from app.completion.settlement import ServedBy
from app.credits.outcomes import Hold, Identity, Settlement

AnsweredHook = Callable[[int], None]
"""What an attempt's upstream call tells the status of a response that is not 200
(``UpstreamCall.answered``)."""


class ObservedCompletion(Protocol):
    """What an observer may read of the completion it watches (``Completion``'s)."""

    hold: Hold
    started: float
    served_by: ServedBy | None

    @property
    def response_id(self) -> str: ...

    @property
    def first_output_at(self) -> float: ...

    @property
    def usage_source(self) -> str: ...

    def billed_tokens(self) -> tuple[int, int]: ...


class CompletionObserver(Protocol):
    """The watcher of one completion (made by ``CompletionObservers.observe`` once it has
    reserved), which may read what the completion exposes when it is told of a step."""

    def attempt_started(self, provider_name: str) -> tuple[bytes, AnsweredHook]:
        """An attempt at ``provider_name`` begins: the header lines its request carries
        (``UpstreamCall.headers``) and what is told a status that is not 200."""
        ...

    def attempt_failed(self, error: str) -> None:
        """The current attempt failed (``error``: its ``UpstreamError.outcome``), before its
        first token or mid-stream."""
        ...

    def settling(self) -> None:
        """The settlement begins: the upstream that served (or the one never answered) is
        done with."""
        ...

    def settled(self, outcome: str, settlement: Settlement | None) -> None:
        """The settlement of ``outcome`` ended: what it closed, or None when it raised."""
        ...

    async def relay_ended(self, settling: asyncio.Task[Settlement] | None) -> None:
        """``Completion.relay`` is about to return (not on an exception): ``settling`` is
        its settlement's task, None when Redis failed under the stream and nothing was
        settled. The relay returns once this has."""
        ...


class CompletionObservers(Protocol):
    """What a ``CompletionService`` is given to watch its requests: told of each before its
    reserve, and the maker of each reserved completion's ``CompletionObserver``."""

    def opening(self, ident: Identity, params: CompletionRequest) -> None:
        """A request is about to reserve (whether or not it then does)."""
        ...

    def observe(self, completion: ObservedCompletion) -> CompletionObserver:
        """The observer of ``completion``, made as the completion is (after its reserve)."""
        ...
