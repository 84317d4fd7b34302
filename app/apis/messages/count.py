"""``POST /v1/messages/count_tokens``: Anthropic's token count, answered with the prompt
tokens svc reserves for a Messages request (its prompt bound: what the request would be
held for, and the most of an upstream's count svc would bill).

A JSON route beside the Messages stream (``MESSAGES.beside``): it takes the key where the
Messages API does (``x-api-key`` or ``Authorization``) and answers errors in Anthropic's
shape. It reserves nothing and charges nothing; the key must be usable and allowed the
model, as for the request it counts, and the count is one of the requests its
``rate_limit_rpm`` allows (the completions' own log: a count over it gets their 429).
"""

from __future__ import annotations

from collections.abc import Mapping

from app.apis.dialect import ReadBody
from app.apis.messages.request import count_tokens, parse_count_tokens_request
from app.apis.messages.wire import CountTokensResponse
from app.completion.catalog import Alias
from app.keys.auth import Authenticator, PresentedKey

PATH = "/v1/messages/count_tokens"


async def count_answer(
    auth: Authenticator,
    key: PresentedKey,
    body: ReadBody,
    aliases: dict[str, Alias],
    limits: Mapping[str, int],
) -> CountTokensResponse:
    """The count of the request ``body`` sends (an ``Answer``): the key checked usable and
    its models read before the body is, and the count started against the key's rate limit
    after every check of the request, so a refused one is not counted."""
    allowed = await key.use(auth.allowed_models)
    params = parse_count_tokens_request(await body(), aliases, allowed=allowed, **limits)
    await key.use(auth.start_uncharged)
    return count_tokens(params)
