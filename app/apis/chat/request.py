"""A Chat Completions request (``POST /v1/chat/completions``): decoding and the checks
decoding cannot make (roles and their fields, one choice), then the engine's request
(``app.completion.request.resolve_params``). The request is the OpenAI wire format
(``app.upstream.wire``), forwarded as it came."""

from __future__ import annotations

from msgspec import UNSET

from app.apis.chat.chunks import ChatStream, ChunkEncoder
from app.completion.catalog import Alias
from app.completion.request import (
    DEFAULT_IMAGE_TOKEN_BOUND,
    CompletionRequest,
    Identify,
    check_message_chars,
    check_message_count,
    check_streamed,
    check_tool_choice,
    enabled_alias,
    resolve_params,
)
from app.core.errors import invalid_value
from app.core.ids import completion_ids
from app.core.validation import decode_json
from app.kv.fields import API_CHAT
from app.upstream.wire import ChatRequest, Message, TextPart


def chat_stream(params: CompletionRequest, created: int) -> ChatStream:
    """The Chat Completions stream of a request (its ``OpenOutput``)."""
    encoder = ChunkEncoder(completion_ids.next(), created, params.alias.id)
    return ChatStream(encoder, requested=params.requested)


def _check_message(message: Message, index: int, max_chars: int) -> None:
    where = f"messages[{index}]"
    if message.role == "tool" and message.tool_call_id is UNSET:
        raise invalid_value(f"{where}.tool_call_id", "A tool message needs 'tool_call_id'.")
    if message.content in (None, UNSET) and message.role != "assistant":
        raise invalid_value(f"{where}.content", "Message content is required.")
    if message.tool_calls is not UNSET and message.role != "assistant":
        raise invalid_value(f"{where}.tool_calls", "Only assistant messages carry tool calls.")
    if (
        isinstance(message.content, list)
        and message.role in ("system", "developer")
        and not all(isinstance(part, TextPart) for part in message.content)
    ):
        raise invalid_value(f"{where}.content", "System messages take text parts only.")
    check_message_chars(message, max_chars, f"{where}.content")


def parse_chat_request(
    body: bytes,
    aliases: dict[str, Alias],
    *,
    max_messages: int = 2048,
    max_message_chars: int = 1_000_000,
    image_token_bound: int = DEFAULT_IMAGE_TOKEN_BOUND,
    identify: Identify | None = None,
    streamed_only: bool = False,
) -> CompletionRequest:
    """Decode and validate a request body, or raise the ``ApiError`` that explains why not.
    ``identify``: the requesting account's (the gateway's requests always have one; without,
    the client's ``safety_identifier`` is forwarded as it came); ``streamed_only``: a
    request without ``stream: true`` is refused (``check_streamed``)."""
    req = decode_json(body, ChatRequest)
    check_streamed(req.stream, streamed_only)
    alias = enabled_alias(aliases, req.model)
    if not req.messages:
        raise invalid_value("messages", "'messages' must contain at least one message.")
    check_message_count(len(req.messages), max_messages, "messages")
    for i, message in enumerate(req.messages):
        _check_message(message, i, max_message_chars)
    if req.n not in (UNSET, None, 1):
        raise invalid_value("n", "svc streams one choice per request: 'n' must be 1.")
    check_tool_choice(req)
    max_tokens = req.max_tokens
    if req.max_completion_tokens not in (UNSET, None):
        max_tokens = req.max_completion_tokens
    limit = max_tokens if isinstance(max_tokens, int) else None
    return resolve_params(
        req,
        aliases,
        alias,
        body_size=len(body),
        output_limit=limit,
        image_token_bound=image_token_bound,
        api=API_CHAT,
        output=chat_stream,
        identify=identify,
    )
