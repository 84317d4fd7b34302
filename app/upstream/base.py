"""The interface every provider implements."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

import msgspec


class Usage(msgspec.Struct, frozen=True):
    """Token counts an upstream reported for one completion."""

    prompt_tokens: int
    completion_tokens: int


class ChatMessage(msgspec.Struct, frozen=True):
    role: str
    content: str


class UpstreamCall(msgspec.Struct, frozen=True, kw_only=True):
    """What is sent upstream: the real model name and the capped output limit."""

    model: str
    messages: list[ChatMessage]
    max_tokens: int
    temperature: float
    top_p: float


class UpstreamError(Exception):
    """An upstream failed. Before the first byte the alias's next upstream is tried, unless
    the failure is a ``client_error`` (HTTP 400/413/422: the request's fault)."""

    def __init__(self, reason: str, *, client_error: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.client_error = client_error


Piece = str | Usage
"""A content piece (one token's text) or, last, the usage an upstream reported."""


class Provider(Protocol):
    """A source of streamed completions."""

    def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        """Yield the pieces in order, grouped as they arrived (one network read each), so
        the relay writes everything that is already there at once. Never an empty group.

        Raises ``UpstreamError`` when the upstream fails.
        """
        ...

    async def close(self) -> None: ...
