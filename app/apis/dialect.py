"""What a streaming API is to svc: a ``Dialect`` of the one completion engine
(``app.completion``). Each API's package (``app.apis.chat``, ``app.apis.responses``,
``app.apis.messages``) exposes one; the HTTP layer serves them all the same way, and a new
streaming API is one more package and one more name in ``routes``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple, Protocol

import msgspec

from app.completion.catalog import Alias
from app.completion.request import CompletionRequest, Identify
from app.core.errors import ApiError
from app.keys.auth import Authenticator, PresentedKey

Headers = list[tuple[str, str]]


class ErrorAnswer(NamedTuple):
    """An error as an API answers it: its body and the headers that go with that body."""

    body: bytes
    headers: Headers


ErrorShape = Callable[[ApiError, str], ErrorAnswer]
"""An API's error, given the request id."""

Header = Callable[[str], str | None]
"""A request header's value by its lower-case name, or None."""


def openai_error(error: ApiError, _rid: str) -> ErrorAnswer:
    """OpenAI's error shape (every route but the Messages API's)."""
    body = error.body()
    return ErrorAnswer(body, [("content-type", "application/json"), *error.headers.items()])


def bearer(header: Header) -> str | None:
    """The request's ``Authorization`` header (``Bearer <key>``), as OpenAI's clients send it."""
    return header("authorization")


class Parse(Protocol):
    """How an API reads a request body into the engine's request, or raises the
    ``ApiError`` saying why not (``identify``: the account's ``safety_identifier``;
    ``streamed_only``: a request that does not ask for a stream is refused)."""

    def __call__(
        self,
        body: bytes,
        aliases: dict[str, Alias],
        *,
        max_messages: int,
        max_message_chars: int,
        image_token_bound: int,
        identify: Identify | None = None,
        streamed_only: bool = False,
    ) -> CompletionRequest: ...


Operation = Callable[[], dict[str, Any]]
"""A route's operation in the OpenAPI document, as the document's dict (``app.apis.operation``
has the pieces): granian serves the streams, so Litestar cannot generate theirs, and an
API's own error shape is more than Litestar's response specs can state."""

ReadBody = Callable[[], Awaitable[bytes]]
"""The request body, read when called: the 413 past the request-size limit, unread."""


class Answer(Protocol):
    """A JSON route's work once its key is presented (``Authenticator.presented``, by the
    HTTP layer, with the key where its dialect reads it): what it answers, or the
    ``ApiError`` saying why not. ``body`` is read when the route's checks of the key allow
    it; ``limits``: the configured limits every request is read with (``max_messages``,
    ``max_message_chars``, ``image_token_bound``)."""

    def __call__(
        self,
        auth: Authenticator,
        key: PresentedKey,
        body: ReadBody,
        aliases: dict[str, Alias],
        limits: Mapping[str, int],
    ) -> Awaitable[msgspec.Struct]: ...


class JsonRoute(NamedTuple):
    """A POST route a dialect's package answers in JSON beside its stream, with its key and
    its errors' shape: its path, its work, and its operation in the OpenAPI document."""

    path: str
    answer: Answer
    operation: Operation


class Dialect(NamedTuple):
    """A streaming API: its path, how it reads a request body (its stream's writer comes
    with the request, ``CompletionRequest.output``), its operation in the OpenAPI document,
    where its key is, and its errors' shape; ``beside``: the JSON routes its package answers
    beside the stream, with its key and errors."""

    path: str
    parse: Parse
    operation: Operation
    credentials: Callable[[Header], str | None] = bearer
    error_shape: ErrorShape = openai_error
    beside: tuple[JsonRoute, ...] = ()


def routes(*dialects: Dialect) -> Mapping[str, Dialect]:
    """The paths the dialects are served on. Litestar answers every other route with or
    without a trailing slash, so these do too (the SDKs never send one)."""
    return {path: dialect for dialect in dialects for path in (dialect.path, dialect.path + "/")}
