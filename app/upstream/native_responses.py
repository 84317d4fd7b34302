"""A Responses API request forwarded as such to a provider that serves that API itself
(``responses_api``), and read back with that API's own event parser."""

from __future__ import annotations

from typing import ClassVar

import msgspec

from app.upstream.base import bearer
from app.upstream.config import ProviderConfig
from app.upstream.responses_sse import ResponsesEvents
from app.upstream.sse import LineParser

PATH = "/responses"


class NativeResponses(msgspec.Struct, frozen=True):
    """A Responses API request (``POST /v1/responses``), kept for a provider that serves that
    API itself: the client's request as svc checked it, encoded once as a JSON object
    without the fields svc sets for each upstream it tries (a ``NativeRequest``)."""

    path: ClassVar[str] = PATH

    fields: bytes  # a JSON object without model, max_output_tokens, stream and store
    store: bool = False
    """Whether the provider keeps the response: always sent, as the Responses API keeps
    every response it is not told to drop; true only when the client asked and the alias
    allows it (``allow_store``)."""

    def body(self, model: str, max_output_tokens: int) -> bytes:
        """The request as forwarded: the upstream's model name, the output cap the
        reservation affords, streaming, and ``store``."""
        head = b'{"model":%s,"max_output_tokens":%d,"stream":true,"store":%s' % (
            msgspec.json.encode(model),
            max_output_tokens,
            b"true" if self.store else b"false",
        )
        if self.fields == b"{}":
            return head + b"}"
        return head + b"," + self.fields[1:]

    @classmethod
    def served_by(cls, config: ProviderConfig) -> bool:
        """Whether ``config``'s provider serves the Responses API (``responses_api``)."""
        return config.responses_api

    @classmethod
    def headers(cls, key: str | None) -> dict[str, str]:
        """OpenAI's: the key as a bearer token."""
        return bearer(key)

    def events(self) -> LineParser:
        """The parser of the provider's stream of Responses events."""
        return ResponsesEvents().parse
