"""A Messages API request forwarded as such to a provider that serves that API itself
(``messages_api``), and read back with that API's own event parser."""

from __future__ import annotations

from typing import ClassVar

import msgspec

from app.upstream.config import ProviderConfig
from app.upstream.messages_sse import MessagesEvents
from app.upstream.sse import LineParser

PATH = "/messages"
ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` a Messages request is sent with: the API's version whose events
``app.upstream.messages_sse`` reads."""


MIN_THINKING_BUDGET = 1024
"""The least ``thinking.budget_tokens`` the Messages API takes."""


class NativeMessages(msgspec.Struct, frozen=True, kw_only=True):
    """A Messages API request (``POST /v1/messages``), kept for a provider that serves that
    API itself: the client's request as svc checked it, its fields as the client wrote them
    (``cache_control``, ``citations``, thinking blocks and the rest inside them included),
    encoded once as a JSON object without the fields svc sets for each upstream it tries
    (a ``NativeRequest``)."""

    path: ClassVar[str] = PATH

    fields: bytes
    """A JSON object without model, max_tokens, stream, metadata and thinking."""
    user_id: str | None = None
    """``metadata.user_id``: svc's safety identifier of the account (and of the client's own
    ``user_id``, hashed in), never the client's value."""
    thinking: bytes | None = None
    """The client's ``thinking``, as sent."""
    thinking_budget: int | None = None
    """Its ``budget_tokens``, when it sets one: kept below the output cap (the API refuses a
    budget that is not), which the reservation may have lowered."""

    def body(self, model: str, max_tokens: int) -> bytes:
        """The request as forwarded: the upstream's model name, the output cap the
        reservation affords, streaming, svc's ``metadata.user_id``, and the thinking budget
        lowered under the cap when it is not (thinking left out when no budget the API takes
        fits under it)."""
        head = b'{"model":%s,"max_tokens":%d,"stream":true' % (
            msgspec.json.encode(model),
            max_tokens,
        )
        if self.user_id is not None:
            head += b',"metadata":{"user_id":%s}' % msgspec.json.encode(self.user_id)
        if self.thinking is not None:
            budget = self.thinking_budget
            if budget is None or budget < max_tokens:
                head += b',"thinking":' + self.thinking
            elif max_tokens - 1 >= MIN_THINKING_BUDGET:
                head += b',"thinking":{"type":"enabled","budget_tokens":%d}' % (max_tokens - 1)
        if self.fields == b"{}":
            return head + b"}"
        return head + b"," + self.fields[1:]

    @classmethod
    def served_by(cls, config: ProviderConfig) -> bool:
        """Whether ``config``'s provider serves the Messages API (``messages_api``)."""
        return config.messages_api

    @classmethod
    def headers(cls, key: str | None) -> dict[str, str]:
        """Anthropic's: the API's version, and the key as ``x-api-key``, as Anthropic's
        clients send it."""
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if key is not None:
            headers["x-api-key"] = key
        return headers

    def events(self) -> LineParser:
        """The parser of the provider's stream of Messages events."""
        return MessagesEvents().parse
