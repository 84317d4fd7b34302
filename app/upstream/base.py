"""The interface every provider implements."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, ClassVar, Protocol

import msgspec

from app.core.errors import UpstreamError
from app.upstream.wire import ChatRequest, Delta

if TYPE_CHECKING:
    from app.upstream.config import ProviderConfig


class Usage(msgspec.Struct, frozen=True, omit_defaults=True):
    """Token counts an upstream reported for one completion, with the details it gave
    (``cached_tokens``, ``reasoning_tokens``, …), passed on to clients that ask for usage."""

    prompt_tokens: int
    completion_tokens: int
    prompt_tokens_details: dict[str, int] | None = None
    completion_tokens_details: dict[str, int] | None = None


class StartUsage(Usage, frozen=True):
    """The counts a stream reported as it began (a Messages provider's ``message_start``):
    the prompt's are the provider's own, the completion's is not final. The relay keeps it
    and reads on for the report at the end; a stream that ends without one (a client that
    left first) bills the prompt from it and the output by svc's estimate."""


def bearer(key: str | None) -> dict[str, str]:
    """A provider's key as a bearer token, as OpenAI's API takes it (none when not set)."""
    return {} if key is None else {"authorization": f"Bearer {key}"}


class NativeRequest(Protocol):
    """A request in an API other than Chat Completions, kept as the client sent it for a
    provider that serves that API itself: what it is sent to (``path`` under the
    provider's ``base_url``), which providers take it, the headers it goes with, its body,
    and the parser of the stream that answers it (``app.upstream.native_responses``,
    ``native_messages``). The kind's own (``path``, ``served_by``, ``headers``) are known
    without a request: a provider writes each path's request head once."""

    path: ClassVar[str]

    @classmethod
    def served_by(cls, config: ProviderConfig) -> bool: ...

    @classmethod
    def headers(cls, key: str | None) -> dict[str, str]:
        """The headers every request of this API carries: the provider's key (None: not
        set) where the API takes it, and what else the API asks of every request."""
        ...

    def body(self, model: str, max_tokens: int) -> bytes: ...

    def events(self) -> Callable[[bytes], object]:
        """A new parser of the answering stream's lines (an ``app.upstream.sse.LineParser``)."""
        ...


class UpstreamCall(msgspec.Struct, frozen=True, kw_only=True):
    """What is sent upstream: the client's request with the real model name and the output
    cap the reservation affords."""

    model: str
    request: ChatRequest
    max_tokens: int
    native: NativeRequest | None = None
    """The request in its own API as the client sent it (Responses or Messages): what a
    provider that serves that API itself (``responses_api``, ``messages_api``) is sent
    instead of ``request``, its translation."""
    headers: bytes = b""
    """Header lines sent besides the provider's own, each ending in CRLF: the W3C trace
    context of the attempt (``traceparent``, ``tracestate``) when traces are on, else none."""
    answered: Callable[[int], None] | None = None
    """Told the status of a response that is not 200, before its error is raised (the
    attempt's span records it when traces are on)."""


class ChoiceEnd:
    """The upstream's chunk with a finish_reason arrived: the choice has no more output.

    ``stop_sequence`` is the stop sequence the upstream said it stopped at, when it said one
    (vLLM's ``stop_reason``, SGLang's ``matched_stop``, Anthropic's ``stop_sequence``): made
    once per stream, at its end; ``CHOICE_END`` is the end that names none."""

    __slots__ = ("stop_sequence",)

    def __init__(self, stop_sequence: str | None = None) -> None:
        self.stop_sequence = stop_sequence

    def __eq__(self, other: object) -> bool:
        return type(other) is ChoiceEnd and other.stop_sequence == self.stop_sequence

    def __hash__(self) -> int:
        return hash(self.stop_sequence)

    def __repr__(self) -> str:
        if self.stop_sequence is None:
            return "CHOICE_END"
        return f"ChoiceEnd({self.stop_sequence!r})"


CHOICE_END = ChoiceEnd()

Piece = str | Delta | Usage | ChoiceEnd
"""A content piece (one token's text), a delta that carries more than text (tool-call
pieces, a refusal, reasoning, log probabilities, a finish reason), a ``ChoiceEnd`` after
the upstream's finish_reason, or, last, the usage an upstream reported (a ``StartUsage``,
the counts reported as the stream began, comes with its first output instead)."""


class Provider(Protocol):
    """A source of streamed completions."""

    def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        """Yield the pieces in order, grouped as they arrived (one network read each), so
        the relay writes everything that is already there at once. Never an empty group.

        Raises ``UpstreamError`` when the upstream fails.
        """
        ...

    async def close(self) -> None: ...


def idle_timeout_error() -> UpstreamError:
    """What a stream the upstream fell silent in fails with (``IdleTimeout``'s error)."""
    return UpstreamError("stream failed: idle timeout", outcome="timeout")
