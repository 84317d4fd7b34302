"""A Responses API request checked and translated into the chat completion svc runs.

Every provider svc knows speaks Chat Completions, so a Responses request becomes one: the
instructions a system message, the input items messages (a ``function_call`` an assistant
message's tool call, a ``function_call_output`` a tool message), tools
(``app.apis.responses.tools``: hosted ones left out) and the text format their Chat Completions
forms. From there the request takes the chat path (the same alias, limits, prompt bound and
reservation). What svc cannot serve statelessly, or
at all, is refused by name before anything is reserved.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from app.apis.responses.response import ResponseSettings
from app.apis.responses.stream import responses_stream
from app.apis.responses.tools import (
    NO_TOOLS,
    OMITTED_TOOLS_HEADER,
    ChatTools,
    chat_tools,
)
from app.apis.responses.wire import (
    InputFile,
    InputImage,
    InputItem,
    InputPart,
    InputText,
    OutputText,
    ReasoningText,
    RefusalContent,
    ResponsesRequest,
    TextConfig,
    ToolChoiceObject,
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
from app.core.errors import invalid_value
from app.core.validation import decode_json
from app.kv.fields import API_RESPONSES
from app.upstream.native_responses import NativeResponses
from app.upstream.wire import (
    ChatRequest,
    ContentPart,
    FileRef,
    FunctionCall,
    ImagePart,
    ImageUrl,
    JsonObjectFormat,
    JsonSchemaFormat,
    JsonSchemaResponseFormat,
    Message,
    NamedFunction,
    NamedToolChoice,
    ResponseFormat,
    TextFormat,
    TextPart,
    ToolCall,
    ToolChoice,
)
from app.upstream.wire import FilePart as ChatFilePart

NO_STORED_STATE = (
    "svc does not keep responses or conversations (every response is store=false): "
    "send the whole conversation in 'input'."
)


class ResponsesParams(msgspec.Struct, frozen=True, kw_only=True):
    """A Responses request: the chat completion it runs as, and what its response echoes."""

    chat: CompletionRequest
    settings: ResponseSettings
    tools: ChatTools = NO_TOOLS
    """The tools as the chat upstream is offered them, and its calls' names mapped back."""


def parse_responses_request(
    body: bytes,
    aliases: dict[str, Alias],
    *,
    max_messages: int,
    max_message_chars: int,
    image_token_bound: int,
    identify: Identify | None = None,
    streamed_only: bool = False,
) -> ResponsesParams:
    """Decode, check and translate a request body, or raise the ``ApiError`` saying why not.
    ``identify``: the requesting account's ``safety_identifier`` (as on chat,
    ``parse_chat_request``), sent whichever API the provider speaks; ``streamed_only`` as
    on chat."""
    req = decode_json(body, ResponsesRequest)
    check_streamed(req.stream, streamed_only)
    _refuse_stateful(req)
    alias = enabled_alias(aliases, req.model)
    served = chat_tools(req.tools or [])
    messages = _messages(req, served)
    if not messages:
        raise invalid_value("input", "'input' must contain at least one message.")
    check_message_count(len(messages), max_messages, "input", "items")
    for message in messages:
        check_message_chars(message, max_message_chars, "input")
    chat = ChatRequest(
        model=req.model,
        messages=messages,
        temperature=req.temperature,
        top_p=req.top_p,
        tools=served.tools or UNSET,
        tool_choice=_tool_choice(req.tool_choice, served),
        parallel_tool_calls=(
            req.parallel_tool_calls if isinstance(req.parallel_tool_calls, bool) else UNSET
        ),
        response_format=_response_format(req.text),
        user=req.user if isinstance(req.user, str) else UNSET,
        safety_identifier=(
            req.safety_identifier if isinstance(req.safety_identifier, str) else UNSET
        ),
        reasoning_effort=req.reasoning.effort if req.reasoning else UNSET,
        # sent on only where the alias allows them (``resolve_params``)
        service_tier=req.service_tier,
        store=req.store,
        metadata=req.metadata,
    )
    check_tool_choice(chat)
    limit = req.max_output_tokens if isinstance(req.max_output_tokens, int) else None
    params = resolve_params(
        chat,
        aliases,
        alias,
        body_size=len(body),
        output_limit=limit,
        image_token_bound=image_token_bound,
        api=API_RESPONSES,
        output=functools.partial(responses_stream, req, served.names),
        identify=identify,
    )
    if params.alias.native_responses:
        native = native_request(
            req, params.alias, params.request.safety_identifier, tools_as_sent(body)
        )
        params = msgspec.structs.replace(params, native=native)
    elif served.omitted:
        headers = (*params.headers, (OMITTED_TOOLS_HEADER, ",".join(served.omitted)))
        params = msgspec.structs.replace(params, headers=headers)
    return ResponsesParams(chat=params, settings=ResponseSettings.of(req, params), tools=served)


def parse_responses_completion(
    body: bytes, aliases: dict[str, Alias], **options: Any
) -> CompletionRequest:
    """``parse_responses_request``'s completion (the Responses dialect's ``Parse``)."""
    return parse_responses_request(body, aliases, **options).chat


# What svc sets in a request it forwards as a Responses request, for each upstream it tries.
_SET_PER_UPSTREAM = ("model", "max_output_tokens", "stream", "store")


class _ToolsAsSent(msgspec.Struct):
    tools: list[dict[str, Any]] | None = None


def tools_as_sent(body: bytes) -> list[dict[str, Any]] | None:
    """A checked request's tools, every field as the client sent it (a hosted tool's own
    settings, which svc does not model, included)."""
    return msgspec.json.decode(body, type=_ToolsAsSent).tools


def native_request(
    req: ResponsesRequest,
    alias: Alias,
    safety_identifier: str | UnsetType = UNSET,
    tools: list[dict[str, Any]] | None = None,
) -> NativeResponses:
    """The checked request, for a provider that serves the Responses API itself: every field
    as the client sent it (fields svc does not know are left out, as in Chat Completions)
    but those svc sets per upstream and those ``alias`` does not allow, with
    ``safety_identifier`` (the account's, as its chat translation has it) in place of the
    client's when given, and ``tools`` (``tools_as_sent``: namespaces and hosted tools
    whole) in place of the tools as svc reads them; stored only when the client asked and
    the alias allows it (the chat path's rule)."""
    fields = msgspec.to_builtins(req)
    if tools is not None:
        fields["tools"] = tools
    withheld = alias.withheld_fields()
    for name in (*_SET_PER_UPSTREAM, *withheld):
        fields.pop(name, None)
    if isinstance(safety_identifier, str):
        fields["safety_identifier"] = safety_identifier
    store = req.store is True and "store" not in withheld
    return NativeResponses(msgspec.json.encode(fields), store=store)


def _refuse_stateful(req: ResponsesRequest) -> None:
    if req.previous_response_id not in (UNSET, None):
        raise invalid_value("previous_response_id", NO_STORED_STATE)
    if req.conversation not in (UNSET, None):
        raise invalid_value("conversation", NO_STORED_STATE)
    if req.prompt not in (UNSET, None):
        raise invalid_value(
            "prompt", "svc does not keep prompt templates: send 'instructions' and 'input'."
        )
    if req.background is True:
        raise invalid_value(
            "background", "svc streams every response as it is made: 'background' must be false."
        )


# -- input ----------------------------------------------------------------------------------


def _messages(req: ResponsesRequest, tools: ChatTools) -> list[Message]:
    messages: list[Message] = []
    if isinstance(req.instructions, str) and req.instructions:
        messages.append(Message(role="system", content=req.instructions))
    if isinstance(req.input, str):
        messages.append(Message(role="user", content=req.input))
        return messages
    for i, item in enumerate(req.input):
        _add_item(messages, item, f"input[{i}]", tools)
    return messages


def _add_item(messages: list[Message], item: InputItem, where: str, tools: ChatTools) -> None:
    if item.type == "message":
        messages.append(_message(item, where))
    elif item.type == "function_call":
        name = _required(item.name, f"{where}.name")
        if isinstance(item.namespace, str):  # the name the upstream was offered it under
            name = tools.upstream_name(item.namespace, name)
        call = ToolCall(
            id=_required(item.call_id, f"{where}.call_id"),
            function=FunctionCall(
                name=name,
                arguments=_required(item.arguments, f"{where}.arguments"),
            ),
        )
        last = messages[-1] if messages else None
        if last is not None and last.role == "assistant" and last.tool_calls is not UNSET:
            last.tool_calls.append(call)  # parallel calls: one assistant turn
        elif last is not None and last.role == "assistant":
            messages[-1] = msgspec.structs.replace(last, tool_calls=[call])
        else:
            messages.append(Message(role="assistant", content=None, tool_calls=[call]))
    elif item.type == "function_call_output":
        output = _required(item.output, f"{where}.output")
        messages.append(
            Message(
                role="tool",
                tool_call_id=_required(item.call_id, f"{where}.call_id"),
                content=output if isinstance(output, str) else _tool_output(output, where),
            )
        )
    elif item.type == "reasoning":
        return  # an earlier response's reasoning: nothing a Chat Completions upstream takes
    elif item.type == "item_reference":
        raise invalid_value(
            f"{where}.type",
            f"{NO_STORED_STATE} (The Vercel AI SDK sends references unless its OpenAI "
            "provider is given store: false.)",
        )
    else:
        raise invalid_value(
            f"{where}.type",
            f"svc takes message, function_call and function_call_output items; "
            f"'{item.type[:64]}' items are not available.",
        )


def _required(value: Any, param: str) -> Any:
    if value is UNSET or value is None:
        raise invalid_value(param, f"'{param.rpartition('.')[2]}' is required here.")
    return value


def _message(item: InputItem, where: str) -> Message:
    role = _required(item.role, f"{where}.role")
    content = _required(item.content, f"{where}.content")
    if isinstance(content, str):
        return Message(role=role, content=content)
    if role == "assistant":
        text = "".join(part.text for part in content if isinstance(part, OutputText | InputText))
        refusals = [part.refusal for part in content if isinstance(part, RefusalContent)]
        return Message(role=role, content=text, refusal=refusals[0] if refusals else UNSET)
    parts = [_part(part, f"{where}.content[{j}]") for j, part in enumerate(content)]
    chat_parts = [part for part in parts if part is not None]
    if role in ("system", "developer") and not all(isinstance(p, TextPart) for p in chat_parts):
        raise invalid_value(f"{where}.content", "System messages take text parts only.")
    return Message(role=role, content=chat_parts)


def _part(part: InputPart, where: str) -> ContentPart | None:
    if isinstance(part, InputText | OutputText):
        return TextPart(text=part.text)
    if isinstance(part, InputImage):
        if not isinstance(part.image_url, str):
            raise invalid_value(
                f"{where}.image_url",
                "svc does not keep files: send the image as 'image_url' (a URL or a data URL).",
            )
        return ImagePart(image_url=ImageUrl(url=part.image_url, detail=part.detail))
    if isinstance(part, InputFile):
        if not isinstance(part.file_data, str):
            raise invalid_value(
                f"{where}.file_data",
                "svc does not keep or fetch files: send the file's content as 'file_data'.",
            )
        filename = part.filename if isinstance(part.filename, str) else UNSET
        return ChatFilePart(file=FileRef(file_data=part.file_data, filename=filename))
    if isinstance(part, ReasoningText):
        return None
    raise invalid_value(f"{where}.type", "A refusal belongs in an assistant message.")


def _tool_output(parts: list[InputPart], where: str) -> str:
    texts = []
    for j, part in enumerate(parts):
        if not isinstance(part, InputText | OutputText):
            raise invalid_value(
                f"{where}.output[{j}].type", "svc passes a function's output on as text only."
            )
        texts.append(part.text)
    return "".join(texts)


# -- tools and formats ----------------------------------------------------------------------


def _tool_choice(choice: str | ToolChoiceObject | Any, tools: ChatTools) -> ToolChoice | Any:
    if not isinstance(choice, ToolChoiceObject):
        if tools.omitted and not tools.tools and choice in ("auto", "required"):
            if choice == "required":
                raise invalid_value(
                    "tool_choice",
                    f"'required' needs a tool svc can run; {', '.join(tools.omitted)} "
                    "(hosted tools) are not available.",
                )
            return UNSET  # "auto" among hosted tools only: no tool to choose
        return choice  # "none", "auto", "required", or left out
    if choice.type != "function":
        raise invalid_value(
            "tool_choice.type",
            f"svc serves function tools only; tool_choice '{choice.type[:64]}' is not available.",
        )
    return NamedToolChoice(function=NamedFunction(name=_required(choice.name, "tool_choice.name")))


def _response_format(text: TextConfig | Any) -> ResponseFormat | Any:
    if not isinstance(text, TextConfig) or text.format is UNSET:
        return UNSET
    fmt = text.format
    if fmt.type == "text":
        return TextFormat()
    if fmt.type == "json_object":
        return JsonObjectFormat()
    return JsonSchemaResponseFormat(
        json_schema=JsonSchemaFormat(
            name=_required(fmt.name, "text.format.name"),
            schema=fmt.schema,
            description=fmt.description if isinstance(fmt.description, str) else UNSET,
            strict=fmt.strict,
        )
    )
