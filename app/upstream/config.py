"""What the models file says about one upstream provider."""

from __future__ import annotations

import msgspec


class ProviderConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An OpenAI-compatible provider."""

    base_url: str
    api_key_env: str | None = None
    """Environment variable holding the key, sent as ``Authorization: Bearer <value>`` (as
    ``x-api-key: <value>`` with a Messages request to a ``messages_api`` provider)."""
    connect_timeout_s: float = 5.0
    first_byte_timeout_s: float = 30.0
    """Time allowed until the first content token; past it the next upstream is tried."""
    idle_timeout_s: float = 60.0
    """Longest silence allowed between two chunks of a stream that has started."""
    max_connections: int = 4096
    cost_currency: str = "USD"
    """The ISO 4217 code of the currency the ``cost`` of this provider's upstreams is in
    (docs/operations.md, "The books")."""
    responses_api: bool = False
    """The provider serves the Responses API (``POST <base_url>/responses``) itself: a
    request to svc's ``/v1/responses`` is forwarded to it as such (model and output cap
    replaced, ``store`` false), not translated to Chat Completions."""
    messages_api: bool = False
    """The provider serves Anthropic's Messages API (``POST <base_url>/messages``) itself: a
    request to svc's ``/v1/messages`` is forwarded to it as such (model and output cap
    replaced, svc's ``metadata.user_id``), with Anthropic's headers (``x-api-key``,
    ``anthropic-version``) in place of ``Authorization``; its other requests still go to
    ``/chat/completions`` as chat completions, with the bearer key."""
