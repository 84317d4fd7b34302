"""``POST /v1/messages/count_tokens``: Anthropic's token count, answered with the prompt
tokens svc reserves for a Messages request (its prompt bound: what the request would be
held for, and the most of an upstream's count svc would bill).

Served beside the streams (``app.http.rsgi.gateway``) so that it takes the key where the
Messages API does (``x-api-key`` or ``Authorization``) and answers errors in Anthropic's
shape. It reserves nothing and charges nothing; the key must be usable and allowed the
model, as for the request it counts, and the count is one of the requests its
``rate_limit_rpm`` allows (the completions' own log: a count over it gets their 429).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import msgspec

from app.apis.messages import COUNT_TOKENS_PATH as PATH
from app.apis.messages.errors import anthropic_error, bearer_or_api_key
from app.apis.messages.request import count_tokens, parse_count_tokens_request
from app.apis.messages.wire import CountTokensResponse
from app.core.errors import ApiError, ClientDisconnected, ErrorKind
from app.core.metrics import METRICS
from app.http.errors import CLIENT_CLOSED_REQUEST, as_api_error
from app.http.headers import SECURITY_HEADERS
from app.http.streams import StreamExchange, request_limits, send_error

if TYPE_CHECKING:
    from app.runtime import Services


async def serve_count_tokens(services: Services, exchange: StreamExchange, rid: str) -> None:
    """Answer one count (200 ``{"input_tokens": N}``), or its error in Anthropic's shape."""
    started = time.perf_counter()
    try:
        answer = await _count(services, exchange)
    except ClientDisconnected:
        METRICS.request_done(PATH, CLIENT_CLOSED_REQUEST, "", time.perf_counter() - started)
        return
    except Exception as exc:
        error = as_api_error(exc)
        send_error(exchange, error, rid, anthropic_error)
        METRICS.labelled(METRICS.rejections, error.kind.code).inc()
        METRICS.request_done(PATH, error.status, "", time.perf_counter() - started)
        return
    body = msgspec.json.encode(answer)
    headers = [
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
        ("cache-control", "no-store"),
        ("request-id", rid),
        ("x-request-id", rid),
        *SECURITY_HEADERS,
    ]
    exchange.answer(200, headers, body)
    METRICS.request_done(PATH, 200, "", time.perf_counter() - started)


async def _count(services: Services, exchange: StreamExchange) -> CountTokensResponse:
    if exchange.method != "POST":
        raise ApiError(ErrorKind.METHOD_NOT_ALLOWED, f"Use POST for {PATH}.")

    credentials = bearer_or_api_key(exchange.header)
    async with services.auth.presented(credentials, exchange.address(services)) as key:
        allowed = await key.use(services.auth.allowed_models)
        body = await exchange.body(services.settings.max_body_bytes)
        limits = request_limits(services)
        params = parse_count_tokens_request(body, services.aliases, allowed=allowed, **limits)
        # after every check of the request, so a refused one is not counted
        await key.use(services.auth.start_uncharged)
        return count_tokens(params)
