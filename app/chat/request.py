"""The chat completion request: decoding, validation and prompt estimates."""

from __future__ import annotations

from typing import Annotated

import msgspec

from app.chat.catalog import AUTO, Alias, route_auto
from app.core.errors import ApiError, ErrorKind, invalid_value
from app.core.tokens import estimate_prompt_tokens, prompt_token_bound
from app.core.validation import decode_json
from app.upstream.base import ChatMessage

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
DEFAULT_TEMPERATURE = 0.7
DEFAULT_TOP_P = 1.0


class TextPart(msgspec.Struct):
    type: str
    text: str | None = None


class Message(msgspec.Struct):
    role: str
    content: str | list[TextPart] | None = None


# The limits of the request, declared once: decoding enforces them and the OpenAPI document
# states them (both read these annotations). The alias's own output limit is checked after.
Temperature = Annotated[float, msgspec.Meta(ge=0, le=2)]
TopP = Annotated[float, msgspec.Meta(ge=0, le=1)]
OutputTokens = Annotated[int, msgspec.Meta(ge=1)]


class ChatRequest(msgspec.Struct):
    """Fields svc reads; unknown fields (``stream_options``, ``user``, ``n``, …) are ignored."""

    model: str
    messages: list[Message]
    temperature: Temperature | None = None
    top_p: TopP | None = None
    max_tokens: OutputTokens | None = None
    max_completion_tokens: OutputTokens | None = None
    stream: bool | None = None


class ChatParams(msgspec.Struct, frozen=True, kw_only=True):
    """A validated request, resolved against the alias catalog."""

    requested: str
    alias: Alias
    messages: list[ChatMessage]
    temperature: float
    top_p: float
    max_tokens: int | None
    prompt_tokens: int
    """Billed when the upstream reports no usage (an estimate)."""
    prompt_token_bound: int
    """Reserved for, and the most of an upstream's prompt_tokens that is billed."""


def _message_text(message: Message, index: int) -> str:
    if message.role not in ROLES:
        raise invalid_value(
            f"messages[{index}].role",
            f"Invalid role '{message.role}'. Expected one of: {', '.join(sorted(ROLES))}.",
        )
    content = message.content
    if content is None:
        if message.role == "assistant":
            return ""
        raise invalid_value(f"messages[{index}].content", "Message content is required.")
    if isinstance(content, str):
        return content
    parts = []
    for j, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise invalid_value(
                f"messages[{index}].content[{j}]", "Only text content parts are supported."
            )
        parts.append(part.text)
    return "".join(parts)


def enabled_alias(aliases: dict[str, Alias], model: str) -> Alias:
    """The enabled alias named ``model``, or the 404 ``model_not_found`` naming the enabled
    ones (chat completions and ``GET /v1/models/{model}``)."""
    alias = aliases.get(model)
    if alias is None or not alias.enabled:
        raise ApiError(
            ErrorKind.MODEL_NOT_FOUND,
            f"The model '{model[:100]}' does not exist. "
            f"Use one of: {', '.join(a for a, v in aliases.items() if v.enabled)}.",
            param="model",
        )
    return alias


def _auto_target(aliases: dict[str, Alias], chosen: str) -> Alias:
    """The alias svc-auto serves with: the heuristic's choice, or svc-fast when an operator
    disabled it (or, failing that, any enabled alias but svc-auto itself)."""
    for alias_id in (chosen, "svc-fast", *aliases):
        alias = aliases.get(alias_id)
        if alias is not None and alias.enabled and alias_id != AUTO:
            return alias
    raise ApiError(ErrorKind.MODEL_NOT_FOUND, "No model is available for svc-auto.", param="model")


def parse_chat_request(
    body: bytes,
    aliases: dict[str, Alias],
    *,
    max_messages: int = 2048,
    max_message_chars: int = 1_000_000,
) -> ChatParams:
    """Decode and validate a request body, or raise the ``ApiError`` that explains why not."""
    req = decode_json(body, ChatRequest)
    alias = enabled_alias(aliases, req.model)
    if not req.messages:
        raise invalid_value("messages", "'messages' must contain at least one message.")
    if len(req.messages) > max_messages:
        raise invalid_value("messages", f"'messages' may hold at most {max_messages} messages.")
    texts = [_message_text(m, i) for i, m in enumerate(req.messages)]
    for i, text in enumerate(texts):
        if len(text) > max_message_chars:
            raise invalid_value(
                f"messages[{i}].content",
                f"A message may hold at most {max_message_chars} characters.",
            )
    temperature = DEFAULT_TEMPERATURE if req.temperature is None else req.temperature
    top_p = DEFAULT_TOP_P if req.top_p is None else req.top_p
    max_tokens, param = req.max_tokens, "max_tokens"
    if req.max_completion_tokens is not None:
        max_tokens, param = req.max_completion_tokens, "max_completion_tokens"
    if max_tokens is not None and not 1 <= max_tokens <= alias.max_output_tokens:
        raise invalid_value(
            param, f"'{param}' must be between 1 and {alias.max_output_tokens} for {alias.id}."
        )
    if alias.id == AUTO:
        alias = _auto_target(aliases, route_auto("\n".join(texts), len(texts)))
    return ChatParams(
        requested=req.model,
        alias=alias,
        messages=[ChatMessage(m.role, t) for m, t in zip(req.messages, texts, strict=True)],
        temperature=temperature,
        top_p=top_p,
        max_tokens=max_tokens,
        prompt_tokens=estimate_prompt_tokens(texts),
        prompt_token_bound=prompt_token_bound(texts),
    )
