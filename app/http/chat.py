"""``POST /v1/chat/completions``: a raw ASGI route that writes its own SSE bytes.

Litestar routes everything else; this one endpoint skips the framework's response
machinery and middleware because they run per token (measured in bench/README.md). It is
not a Litestar route at all: ``app.http.app.Gateway`` is its only way in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import time
from typing import TYPE_CHECKING, Any

from litestar.types import Receive, Scope, Send

from app.chat.request import parse_chat_request
from app.core.errors import ApiError, ErrorKind
from app.core.metrics import METRICS
from app.http.deps import request_address
from app.http.errors import as_api_error
from app.http.headers import SECURITY_HEADERS
from app.kv.client import REDIS_ERRORS

if TYPE_CHECKING:
    from app.chat.completion import Completion
    from app.chat.request import ChatParams
    from app.credits.outcomes import Identity
    from app.runtime import Services

log = logging.getLogger("svc.http")
_SECURITY = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS]
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
    *_SECURITY,
]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")


def incoming_request_id(scope: Scope) -> str | None:
    """The client's ``x-request-id``, when it is short and plain enough to log and echo."""
    for key, value in scope["headers"]:
        if key == b"x-request-id":
            return value.decode() if _REQUEST_ID.fullmatch(value) else None
    return None


def new_request_id() -> str:
    return "req_" + secrets.token_hex(12)


async def send_error(send: Send, error: ApiError, rid: str) -> None:
    body = error.body()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", rid.encode()),
        *_SECURITY,
    ]
    headers += [(k.encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class ClientDisconnected(Exception):
    """The client closed the connection before its request body arrived in full."""


def _too_large(limit: int) -> ApiError:
    return ApiError(ErrorKind.REQUEST_TOO_LARGE, f"The request body is larger than {limit} bytes.")


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes (413) without reading it all;
    ``ClientDisconnected`` when the client leaves before sending it all."""
    declared = _header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk: bytes = message.get("body", b"")  # type: ignore[assignment]
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _open(services: Services, scope: Scope, receive: Receive) -> Completion:
    if scope.get("method") != "POST":
        raise ApiError(ErrorKind.METHOD_NOT_ALLOWED, "Use POST for /v1/chat/completions.")
    params: ChatParams | None = None

    async def reserve(ident: Identity) -> Completion:
        # The body is read once the key is known (a bad key is refused unread), and once
        # only: when Redis lost the key's record, the reservation is tried again with it.
        nonlocal params
        if params is None:
            settings = services.settings
            params = parse_chat_request(
                await read_body(scope, receive, settings.max_body_bytes),
                services.aliases,
                max_messages=settings.max_messages,
                max_message_chars=settings.max_message_chars,
                image_token_bound=settings.image_token_bound,
            )
        return await services.completions.open(ident, params)

    return await services.auth.authenticated(
        _header(scope, b"authorization"), request_address(services, scope), reserve
    )


async def _watch_disconnect(receive: Receive, relay: asyncio.Task[Any]) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            relay.cancel()
            return


CHAT_PATH = "/v1/chat/completions"
# The paths the Gateway serves chat on. Litestar answers every other route with or without
# a trailing slash, so chat does too (the SDKs never send one): same handler, same request
# id, same metric series.
CHAT_PATHS = (CHAT_PATH, CHAT_PATH + "/")


async def serve_chat(
    services: Services, scope: Scope, receive: Receive, send: Send, rid: str
) -> None:
    """Reserve, stream, settle. Errors before the first byte are plain JSON responses."""
    started = time.perf_counter()
    try:
        completion = await _open(services, scope, receive)
    except ClientDisconnected:
        # Clients do this (a timeout, a cancelled upload): nothing was reserved, nobody
        # is left to answer, and it is no server error.
        log.info("client disconnected before sending the whole request body")
        return
    except Exception as exc:
        error = as_api_error(exc)
        await send_error(send, error, rid)
        METRICS.labelled(METRICS.rejections, error.kind.code).inc()
        METRICS.request_done(CHAT_PATH, error.status, "", time.perf_counter() - started)
        return

    model = completion.params.alias.id
    first_write = True

    async def send_bytes(data: bytes, more: bool = True) -> None:
        nonlocal first_write
        if first_write:
            first_write = False
            METRICS.labelled(METRICS.ttfb, model).observe(time.perf_counter() - started)
        await send({"type": "http.response.body", "body": data, "more_body": more})

    headers = [*SSE_HEADERS, (b"x-request-id", rid.encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    METRICS.open_streams.inc()
    relay = asyncio.ensure_future(completion.relay(send_bytes))
    watcher = asyncio.ensure_future(_watch_disconnect(receive, relay))
    try:
        await relay  # its last write ended the response
    except (asyncio.CancelledError, OSError, RuntimeError):
        pass  # the client went away; the relay settled what was generated
    except REDIS_ERRORS as exc:
        # A settlement (or heartbeat) Redis did not answer in time. The response is cut
        # short as before; a reservation left open passes its deadline and the sweeper
        # refunds it. An outage, not a bug: one line, no traceback.
        log.warning(
            "stream ended on a Redis failure (%s); the sweeper refunds a reservation left open",
            type(exc).__name__,
        )
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        METRICS.open_streams.dec()
        METRICS.request_done(CHAT_PATH, 200, model, time.perf_counter() - started)
