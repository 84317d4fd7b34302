"""The OpenAI Chat Completions wire format, as svc reads and forwards it.

The request is modelled whole (every field the upstream API defines), so a client's tools,
images, response formats and sampling settings reach the upstream as sent; a field svc does
not know is ignored. Fields a client left out stay out of what is forwarded (``UNSET``).

The stream's deltas are modelled too: plain text travels as ``str`` (the common case, kept
cheap), everything else (tool-call pieces, refusals, reasoning, log probabilities, the
upstream's finish reason) as a ``Delta``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

# -- request: messages ----------------------------------------------------------------------


class ImageUrl(msgspec.Struct, omit_defaults=True):
    url: str
    detail: Literal["auto", "low", "high"] | UnsetType = UNSET


class InputAudio(msgspec.Struct, omit_defaults=True):
    data: str  # base64
    format: str


class FileRef(msgspec.Struct, omit_defaults=True):
    file_data: str | UnsetType = UNSET
    file_id: str | UnsetType = UNSET
    filename: str | UnsetType = UNSET


class TextPart(msgspec.Struct, tag="text", tag_field="type"):
    text: str


class ImagePart(msgspec.Struct, tag="image_url", tag_field="type"):
    image_url: ImageUrl


class AudioPart(msgspec.Struct, tag="input_audio", tag_field="type"):
    input_audio: InputAudio


class FilePart(msgspec.Struct, tag="file", tag_field="type"):
    file: FileRef


class RefusalPart(msgspec.Struct, tag="refusal", tag_field="type"):
    refusal: str


ContentPart = TextPart | ImagePart | AudioPart | FilePart | RefusalPart
MediaPart = ImagePart | AudioPart | FilePart


class FunctionCall(msgspec.Struct):
    name: str
    arguments: str


class ToolCall(msgspec.Struct):
    """A tool call an assistant message made (sent back with the tool's result)."""

    id: str
    function: FunctionCall
    type: Literal["function"] = "function"


class Message(msgspec.Struct, omit_defaults=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | UnsetType | None = UNSET
    name: str | UnsetType = UNSET
    tool_calls: list[ToolCall] | UnsetType = UNSET  # assistant
    tool_call_id: str | UnsetType = UNSET  # tool
    refusal: str | UnsetType | None = UNSET  # assistant


def message_text(message: Message) -> str:
    """The text of a message's content: the string, or its text parts joined."""
    content = message.content
    if content is None or content is UNSET:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextPart))


# -- request: tools and formats -------------------------------------------------------------


class FunctionDefinition(msgspec.Struct, omit_defaults=True):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
    description: str | UnsetType = UNSET
    parameters: dict[str, Any] | UnsetType = UNSET
    strict: bool | UnsetType | None = UNSET


class Tool(msgspec.Struct):
    function: FunctionDefinition
    type: Literal["function"] = "function"


class NamedFunction(msgspec.Struct):
    name: str


class NamedToolChoice(msgspec.Struct):
    function: NamedFunction
    type: Literal["function"] = "function"


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class JsonSchemaFormat(msgspec.Struct, omit_defaults=True):
    name: str
    schema: dict[str, Any] | UnsetType = UNSET
    description: str | UnsetType = UNSET
    strict: bool | UnsetType | None = UNSET


class TextFormat(msgspec.Struct, tag="text", tag_field="type"):
    pass


class JsonObjectFormat(msgspec.Struct, tag="json_object", tag_field="type"):
    pass


class JsonSchemaResponseFormat(msgspec.Struct, tag="json_schema", tag_field="type"):
    json_schema: JsonSchemaFormat


ResponseFormat = TextFormat | JsonObjectFormat | JsonSchemaResponseFormat


class StreamOptions(msgspec.Struct, omit_defaults=True):
    include_usage: bool | UnsetType = UNSET


# The limits of the request, declared once: decoding enforces them and the OpenAPI document
# states them (both read these annotations). A limit above the alias's own is lowered to it after.
Temperature = Annotated[float, msgspec.Meta(ge=0, le=2)]
TopP = Annotated[float, msgspec.Meta(ge=0, le=1)]
TopK = Annotated[int, msgspec.Meta(ge=-1)]
"""An extension of the servers that take it (vLLM, SGLang, …): -1 (or 0) is no limit."""
OutputTokens = Annotated[int, msgspec.Meta(ge=1)]
Penalty = Annotated[float, msgspec.Meta(ge=-2, le=2)]
TopLogprobs = Annotated[int, msgspec.Meta(ge=0, le=20)]
Stop = str | Annotated[list[str], msgspec.Meta(max_length=4)] | None


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
"""OpenAI's reasoning efforts (``none`` and ``xhigh`` for the newest models, which Codex
CLI sends), as chat's ``reasoning_effort`` and the Responses API's ``reasoning.effort``."""


class ChatRequest(msgspec.Struct, omit_defaults=True):
    """The request as a client sends it. svc reads ``model``, ``messages``, the output limit
    and ``stream_options``, and sends its own ``safety_identifier`` (``app.upstream.safety``);
    every other field is forwarded as it came. Unknown fields are ignored."""

    model: str
    messages: list[Message]
    temperature: Temperature | UnsetType | None = UNSET
    top_p: TopP | UnsetType | None = UNSET
    top_k: TopK | UnsetType | None = UNSET
    """Not OpenAI's: sent only where the alias allows it (``allow_top_k``)."""
    max_tokens: OutputTokens | UnsetType | None = UNSET
    max_completion_tokens: OutputTokens | UnsetType | None = UNSET
    stream: bool | UnsetType | None = UNSET
    stream_options: StreamOptions | UnsetType | None = UNSET
    n: Annotated[int, msgspec.Meta(ge=1)] | UnsetType | None = UNSET
    tools: list[Tool] | UnsetType = UNSET
    tool_choice: ToolChoice | UnsetType = UNSET
    parallel_tool_calls: bool | UnsetType = UNSET
    response_format: ResponseFormat | UnsetType = UNSET
    stop: Stop | UnsetType = UNSET
    seed: int | UnsetType | None = UNSET
    presence_penalty: Penalty | UnsetType | None = UNSET
    frequency_penalty: Penalty | UnsetType | None = UNSET
    logit_bias: dict[str, Annotated[float, msgspec.Meta(ge=-100, le=100)]] | UnsetType | None = (
        UNSET
    )
    logprobs: bool | UnsetType | None = UNSET
    top_logprobs: TopLogprobs | UnsetType | None = UNSET
    user: str | UnsetType = UNSET
    safety_identifier: str | UnsetType = UNSET
    reasoning_effort: ReasoningEffort | UnsetType | None = UNSET
    service_tier: str | UnsetType | None = UNSET
    metadata: dict[str, str] | UnsetType | None = UNSET
    prediction: dict[str, Any] | UnsetType | None = UNSET
    modalities: list[Literal["text", "audio"]] | UnsetType | None = UNSET
    audio: dict[str, Any] | UnsetType | None = UNSET
    store: bool | UnsetType | None = UNSET


# -- the stream -----------------------------------------------------------------------------


class ToolCallFunctionDelta(msgspec.Struct, omit_defaults=True):
    name: str | UnsetType = UNSET
    arguments: str | UnsetType = UNSET


class ToolCallDelta(msgspec.Struct, omit_defaults=True):
    """A piece of a tool call as it streams: the first piece of a call has its id, type and
    name; later pieces add to its arguments."""

    index: int
    id: str | UnsetType = UNSET
    type: Literal["function"] | UnsetType = UNSET
    function: ToolCallFunctionDelta | UnsetType = UNSET


class ToolUseDelta(ToolCallDelta):
    """The first piece of a tool call a Messages provider made (``app.upstream.
    messages_sse``): its ``id`` is that provider's ``tool_use`` id, which svc's Messages
    stream keeps, so the conversation sends the provider its own id back. It encodes as any
    ``ToolCallDelta``; only a Messages request's stream reads provider's events."""


class Delta(msgspec.Struct, frozen=True, omit_defaults=True):
    """What one upstream chunk carried beyond plain text: relayed re-encoded in svc's chunk
    (``finish_reason`` only decides svc's own)."""

    content: str | UnsetType = UNSET
    tool_calls: list[ToolCallDelta] | UnsetType = UNSET
    refusal: str | UnsetType = UNSET
    reasoning_content: str | UnsetType = UNSET
    reasoning: str | UnsetType = UNSET
    logprobs: msgspec.Raw | UnsetType = UNSET
    finish_reason: str | UnsetType = UNSET

    def carries_output(self) -> bool:
        """Whether the delta has anything the client sees (each such piece is at least one
        completion token)."""
        return bool(
            self.content
            or self.tool_calls is not UNSET
            or self.refusal
            or self.reasoning_content
            or self.reasoning
        )
