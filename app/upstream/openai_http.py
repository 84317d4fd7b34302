"""What svc sends to an OpenAI-compatible upstream over HTTP, and what it makes of a refusal:
the protocol's side of the upstream client (``app.upstream.http11``), free of its I/O."""

from __future__ import annotations

import logging
import os
import re

import msgspec
from msgspec import UNSET

from app.core.errors import UpstreamError, UpstreamOutcome
from app.upstream.base import NativeRequest, UpstreamCall, bearer
from app.upstream.config import ProviderConfig
from app.upstream.native_messages import NativeMessages
from app.upstream.native_responses import NativeResponses
from app.upstream.sse import LineParser, parse_data_line
from app.upstream.wire import StreamOptions

log = logging.getLogger("svc.upstream")
_encode = msgspec.json.encode
CLIENT_ERROR_STATUSES = frozenset({400, 413, 422})


_USAGE_ALWAYS = StreamOptions(include_usage=True)


def request_body(call: UpstreamCall) -> bytes:
    """The JSON sent upstream: the client's request as it came, with the real model, always
    streaming, usage always requested (svc bills it), one choice, and the output cap the
    reservation affords, under the name the client used for it."""
    req = call.request
    if req.max_completion_tokens not in (UNSET, None):
        limits = {"max_completion_tokens": call.max_tokens, "max_tokens": UNSET}
    else:
        limits = {"max_tokens": call.max_tokens, "max_completion_tokens": UNSET}
    return _encode(
        msgspec.structs.replace(
            req, model=call.model, stream=True, stream_options=_USAGE_ALWAYS, n=UNSET, **limits
        )
    )


class Exchange(msgspec.Struct, frozen=True):
    """One upstream call over HTTP: the path under the provider's ``base_url``, the body,
    and the parser of the stream that answers it."""

    path: str
    body: bytes
    parse: LineParser


CHAT_PATH = "/chat/completions"
NATIVES: tuple[type[NativeRequest], ...] = (NativeResponses, NativeMessages)
"""The APIs a request may be forwarded in as the client sent it, to a provider serving them."""
_NATIVE_PATHS = {native.path: native for native in NATIVES}
RESPONSES_PATH = NativeResponses.path
MESSAGES_PATH = NativeMessages.path
PATHS = (CHAT_PATH, *_NATIVE_PATHS)


def exchange(call: UpstreamCall, config: ProviderConfig) -> Exchange:
    """A Responses request to a provider that serves the Responses API goes as one, a
    Messages request to a provider that serves the Messages API as one; anything else as a
    chat completion (a Responses or Messages request in its translation)."""
    native = call.native
    if native is not None and native.served_by(config):
        return Exchange(native.path, native.body(call.model, call.max_tokens), native.events())
    return Exchange(CHAT_PATH, request_body(call), parse_data_line)


def sanitize(message: str, model: str) -> str:
    """An upstream's error message made safe to show: no model name, URL or provider id."""
    text = re.sub(re.escape(model), "the model", message, flags=re.IGNORECASE)
    text = re.sub(r"https?://\S+", "", text)
    return text[:300].strip() or "The request was rejected as invalid."


def provider_headers(config: ProviderConfig, path: str = CHAT_PATH) -> dict[str, str]:
    """The headers of every request to ``path`` of the provider: on the path of an API it
    serves (``NATIVES``), that API's own (``NativeRequest.headers``: its key where that API
    takes it); else its key as a bearer token. Only the variable's name is ever logged."""
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    key = None
    if config.api_key_env:
        key = os.environ.get(config.api_key_env) or None
        if key is None and path == CHAT_PATH:  # once per provider: each has this path's head
            log.warning("provider key variable %s is not set", config.api_key_env)
    native = _NATIVE_PATHS.get(path)
    if native is not None and native.served_by(config):
        headers.update(native.headers(key))
    else:
        headers.update(bearer(key))
    return headers


_STATUS_CLASSES: dict[int, UpstreamOutcome] = {3: "3xx", 4: "4xx", 5: "5xx"}


def status_outcome(status: int) -> UpstreamOutcome:
    """The outcome of an attempt answered with ``status`` (not 200): its class; a status
    that is neither a redirect nor an error (another 2xx, a 1xx) is no stream svc can read."""
    return _STATUS_CLASSES.get(status // 100, "stream_error")


def status_error(status: int, body: bytes, model: str) -> UpstreamError:
    if status in CLIENT_ERROR_STATUSES:
        message = ""
        try:
            message = str(msgspec.json.decode(body)["error"]["message"])
        except Exception:
            message = ""
        return UpstreamError(sanitize(message, model), client_error=True)
    return UpstreamError(f"upstream status {status}", outcome=status_outcome(status))
