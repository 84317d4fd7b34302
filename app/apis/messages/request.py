"""A Messages API request checked and translated into the chat completion svc runs.

Every provider svc knows speaks Chat Completions, so a Messages request becomes one, and
takes the chat path from there (the same alias, output limit, prompt bound, reservation):

- ``system`` (a string or text blocks) is a system message, first;
- a user turn is a user message of parts (text, ``image_url`` for an image, a base64 image
  as a data URL, ``file`` for a PDF, text for a plain-text document); its ``tool_result``
  blocks are ``tool`` messages, written before the rest of the turn (they answer the
  assistant turn before it), in their order, and the images and documents a result holds
  follow in the user message (Chat Completions takes text only in a tool message);
- an assistant turn is an assistant message: its text, its ``tool_use`` blocks as tool calls
  (the arguments the input's JSON), its thinking left out;
- consecutive turns of one role pass as they came (Chat Completions takes them);
- ``tools`` are function tools (``input_schema`` their parameters); ``tool_choice`` auto,
  any, tool and none are "auto", "required", the named function and "none";
  ``disable_parallel_tool_use`` is ``parallel_tool_calls: false``;
- ``max_tokens`` (required, as Anthropic's) is the client's output limit, lowered to
  the alias's when above it; ``stop_sequences`` is ``stop`` (at most the chat path's four);
  ``temperature`` (Anthropic's default, 1, when left out) and ``top_p`` pass, ``top_k``
  too where the alias allows it (``allow_top_k``: Chat Completions has no such field; the
  servers that take it have it as an extension); ``metadata.user_id`` is the client's
  identifier of its end user, which the account's ``safety_identifier`` is made from;
- ``output_config.format`` (structured outputs) is a strict ``json_schema``
  ``response_format`` (``app.apis.messages.output_format``).

Accepted and not forwarded: ``thinking`` (no thinking is shown: an upstream's reasoning is
billed, as on the other APIs), ``output_config``'s other fields (``effort``), ``is_error``
of a tool result, ``cache_control`` and ``citations`` (unknown fields).
Refused by name before anything is reserved: server tools, ``mcp_servers``,
``container``, files by id, documents by URL, images over
``conversation.MAX_IMAGE_BYTES``, more stop sequences than the chat path takes, and blocks
a turn of that role cannot hold.

For an alias with a provider that serves the Messages API itself (``messages_api``), the
checked request is also kept as the client wrote it (``native_request``), and that provider
is sent it instead of the translation: everything above that is "not forwarded" reaches it.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET

from app.apis.messages.conversation import add_turn, chat_tool_choice, chat_tools, system_messages
from app.apis.messages.output_format import response_format
from app.apis.messages.stream import MessagesStream
from app.apis.messages.wire import (
    CountTokensRequest,
    CountTokensResponse,
    MessagesRequest,
    ThinkingParam,
)
from app.completion.catalog import Alias
from app.completion.request import (
    CompletionRequest,
    Identify,
    check_message_chars,
    check_message_count,
    check_streamed,
    check_tool_choice,
    enabled_alias,
    resolve_params,
)
from app.core.errors import invalid_value, model_not_allowed
from app.core.validation import decode_json
from app.kv.fields import API_MESSAGES
from app.upstream.native_messages import NativeMessages
from app.upstream.wire import (
    ChatRequest,
)

DEFAULT_TEMPERATURE = 1.0
"""Anthropic's default (the chat path's own is 0.7)."""
MAX_STOP_SEQUENCES = 4
"""What the chat request's ``stop`` holds (``app.upstream.wire.Stop``)."""


def parse_messages_request(
    body: bytes,
    aliases: dict[str, Alias],
    *,
    max_messages: int,
    max_message_chars: int,
    image_token_bound: int,
    identify: Identify | None = None,
    streamed_only: bool = False,
) -> CompletionRequest:
    """Decode, check and translate a ``POST /v1/messages`` body, or raise the ``ApiError``
    saying why not (nothing is reserved before). ``identify``: the requesting account's
    ``safety_identifier``, given the client's ``metadata.user_id`` (as on chat);
    ``streamed_only`` as on chat."""
    req = decode_json(body, MessagesRequest)
    check_streamed(req.stream, streamed_only)
    alias = enabled_alias(aliases, req.model)
    stop = req.stop_sequences or []
    if len(stop) > MAX_STOP_SEQUENCES:
        raise invalid_value(
            "stop_sequences",
            f"svc takes at most {MAX_STOP_SEQUENCES} stop sequences; {len(stop)} were sent.",
        )
    metadata = req.metadata if req.metadata not in (UNSET, None) else None
    user_id = metadata.user_id if metadata is not None else None
    chat = _chat_request(req, max_messages=max_messages, max_message_chars=max_message_chars)
    chat = msgspec.structs.replace(
        chat,
        temperature=DEFAULT_TEMPERATURE if req.temperature in (UNSET, None) else req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,  # left out by ``resolve_params`` unless the alias allows it
        stop=stop or UNSET,
        safety_identifier=user_id if isinstance(user_id, str) and user_id else UNSET,
        response_format=response_format(req.output_config, max_message_chars),
    )
    params = _resolve(
        chat,
        aliases,
        alias,
        body_size=len(body),
        output_limit=req.max_tokens,
        image_token_bound=image_token_bound,
        identify=identify,
    )
    if params.alias.native_messages:
        user_id = params.request.safety_identifier
        native = native_request(
            body, req, params.alias, user_id if isinstance(user_id, str) else None
        )
        params = msgspec.structs.replace(params, native=native)
    return params


# The request's fields a provider that serves the Messages API is sent as the client wrote
# them (every block inside them whole: cache_control, citations, thinking blocks, ...);
# model, max_tokens, stream, metadata and thinking svc writes itself for each upstream.
# Fields svc does not know stay out (as on the Responses API's native path): a field
# Anthropic adds may change what the operator pays per token, which no alias price sees.
_FORWARDED = (
    "system",
    "messages",
    "tools",
    "tool_choice",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "cache_control",
    "output_config",
)
_GATED = ("service_tier",)  # sent on where the alias allows it (``GATED_FIELDS``)


def native_request(
    body: bytes, req: MessagesRequest, alias: Alias, user_id: str | None = None
) -> NativeMessages:
    """The checked request (``body``, decoded and checked as ``req``), for a provider that
    serves the Messages API itself: its fields in ``_FORWARDED`` as the client wrote them,
    ``service_tier`` only where ``alias`` allows it, and ``user_id`` (svc's safety
    identifier of the account, never the client's own) as ``metadata.user_id``."""
    raw = msgspec.json.decode(body, type=dict[str, msgspec.Raw])
    withheld = alias.withheld_fields()
    names = (*_FORWARDED, *(name for name in _GATED if name not in withheld))
    fields = {name: raw[name] for name in names if name in raw}
    thinking = req.thinking if isinstance(req.thinking, ThinkingParam) else None
    budget = None
    if thinking is not None and isinstance(thinking.budget_tokens, int):
        budget = thinking.budget_tokens
    return NativeMessages(
        fields=msgspec.json.encode(fields),
        user_id=user_id,
        thinking=bytes(raw["thinking"]) if thinking is not None else None,
        thinking_budget=budget,
    )


def parse_count_tokens_request(
    body: bytes,
    aliases: dict[str, Alias],
    *,
    max_messages: int,
    max_message_chars: int,
    image_token_bound: int,
    allowed: frozenset[str] | None = None,
) -> CompletionRequest:
    """A ``POST /v1/messages/count_tokens`` body, checked and translated as a Messages
    request is (the output settings aside: ``max_tokens`` is not needed); ``allowed``: the
    models the key may use (None: all), held to as for the request it counts."""
    req = decode_json(body, CountTokensRequest)
    alias = enabled_alias(aliases, req.model)
    chat = _chat_request(req, max_messages=max_messages, max_message_chars=max_message_chars)
    params = _resolve(
        chat,
        aliases,
        alias,
        body_size=len(body),
        output_limit=None,
        image_token_bound=image_token_bound,
        identify=None,
    )
    if allowed is not None and not allowed.issuperset(params.models.split()):
        raise model_not_allowed(params.requested, routed=params.requested != params.alias.id)
    return params


def count_tokens(params: CompletionRequest) -> CountTokensResponse:
    """What ``count_tokens`` answers: the prompt tokens svc reserves for (and bills at the
    most), the bound of the request's prompt."""
    return CountTokensResponse(input_tokens=params.prompt_token_bound)


def _resolve(
    chat: ChatRequest,
    aliases: dict[str, Alias],
    alias: Alias,
    *,
    body_size: int,
    output_limit: int | None,
    image_token_bound: int,
    identify: Identify | None,
) -> CompletionRequest:
    return resolve_params(
        chat,
        aliases,
        alias,
        body_size=body_size,
        output_limit=output_limit,
        image_token_bound=image_token_bound,
        api=API_MESSAGES,
        output=_stream,
        identify=identify,
    )


def _stream(params: CompletionRequest, _created: int) -> MessagesStream:
    """A Messages request's stream (its ``OpenOutput``)."""
    return MessagesStream(model=params.alias.id, requested=params.requested)


def _chat_request(
    req: CountTokensRequest, *, max_messages: int, max_message_chars: int
) -> ChatRequest:
    """The chat request of ``req``'s conversation and tools (no sampling settings yet)."""
    _refuse_server_state(req)
    if not req.messages:
        raise invalid_value("messages", "'messages' must contain at least one message.")
    check_message_count(len(req.messages), max_messages, "messages")
    messages = system_messages(req.system)
    if messages:
        check_message_chars(messages[0], max_message_chars, "system", "The system prompt")
    for i, turn in enumerate(req.messages):
        start = len(messages)
        add_turn(messages, turn, f"messages[{i}]")
        for message in messages[start:]:
            check_message_chars(message, max_message_chars, f"messages[{i}].content")
    check_message_count(len(messages), max_messages, "messages", note=" (as translated)")
    tools = chat_tools(req.tools or [])
    choice, parallel = chat_tool_choice(req.tool_choice, bool(tools))
    chat = ChatRequest(
        model=req.model,
        messages=messages,
        tools=tools or UNSET,
        tool_choice=choice,
        parallel_tool_calls=parallel,
    )
    check_tool_choice(chat)
    return chat


def _refuse_server_state(req: CountTokensRequest) -> None:
    if req.mcp_servers:
        raise invalid_value(
            "mcp_servers",
            "svc does not connect to MCP servers: give their tools as client tools in 'tools'.",
        )
    if req.container not in (UNSET, None):
        raise invalid_value(
            "container", "svc runs no containers (code execution is a server tool)."
        )
