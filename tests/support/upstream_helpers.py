"""What the upstream and stream tests share: a call to the mock upstream (the ``mock``
fixture in conftest.py runs it in process), and services enough for ``serve_stream``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from types import SimpleNamespace
from typing import cast

from app.completion.catalog import Alias
from app.completion.service import CompletionService
from app.credits.outcomes import Identity
from app.keys.auth import Authenticator, PresentedKey
from app.runtime import Services
from app.upstream.base import UpstreamCall
from app.upstream.safety import SafetyIdentifiers
from app.upstream.wire import ChatRequest, Message


def upstream_call(model: str = "m") -> UpstreamCall:
    """One short chat request to ``model``, capped at 100 output tokens."""
    request = ChatRequest(model=model, messages=[Message(role="user", content="hi")])
    return UpstreamCall(model=model, request=request, max_tokens=100)


def stream_services(
    completions: CompletionService,
    ident: Identity,
    aliases: Mapping[str, Alias],
    *,
    non_streaming: str = "stream",
) -> Services:
    """What ``app.http.streams.serve_stream`` reads of the services: the request limits
    (and ``SVC_NON_STREAMING``), the aliases, an authentication that always answers
    ``ident``, the safety identifiers and ``completions``."""

    @contextlib.asynccontextmanager
    async def presented(authorization: str | None, address: str) -> AsyncIterator[PresentedKey]:
        yield PresentedKey(cast(Authenticator, None), authorization, address, ident)

    services = SimpleNamespace(
        settings=SimpleNamespace(
            max_body_bytes=1 << 20,
            max_messages=2048,
            max_message_chars=1_000_000,
            image_token_bound=4_096,
            non_streaming=non_streaming,
        ),
        aliases=aliases,
        auth=SimpleNamespace(presented=presented),
        safety_identifiers=SafetyIdentifiers(b"the stream tests' pepper"),
        completions=completions,
        trusted_proxies=[],
    )
    return cast(Services, services)
