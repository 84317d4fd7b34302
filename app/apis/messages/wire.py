"""Anthropic's Messages API as svc reads and writes it (``POST /v1/messages``,
``POST /v1/messages/count_tokens``).

The request is modelled field by field as Anthropic documents it, so decoding checks what
svc serves and a wrong type or value is a 400 naming its path (``messages[2].content[0]
.source.media_type``, ``output_config.format.schema``). What svc cannot serve is modelled
only to be refused by name in ``app.apis.messages.request``: server tools, MCP servers,
containers, files by id. Fields svc does not know are ignored, as in Chat Completions
(``cache_control``, ``citations``, ``service_tier``, ``context_management``…).

The stream's events are modelled too (``MessageStart`` … ``MessageStop``, ``ErrorEvent``):
``app.apis.messages.stream`` encodes the rare ones with them and writes the per-token ones from
byte templates the unit tests hold equal to them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from app.completion.output import SvcMetadata
from app.upstream.wire import OutputTokens, TopP

AnthropicTemperature = Annotated[float, msgspec.Meta(ge=0, le=1)]
"""Anthropic's range (Chat Completions' goes to 2)."""
TopK = Annotated[int, msgspec.Meta(ge=0)]
ImageMediaType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]

# -- content blocks -------------------------------------------------------------------------


class TextBlock(msgspec.Struct, tag="text", tag_field="type"):
    text: str


class Base64Image(msgspec.Struct, tag="base64", tag_field="type"):
    media_type: ImageMediaType
    data: str


class Base64Pdf(msgspec.Struct, tag="base64", tag_field="type"):
    media_type: Literal["application/pdf"]
    data: str


class UrlSource(msgspec.Struct, tag="url", tag_field="type"):
    url: str


class FileSource(msgspec.Struct, tag="file", tag_field="type"):
    """A file uploaded to Anthropic's Files API: read only to be refused (svc keeps no
    files)."""

    file_id: str


class PlainTextSource(msgspec.Struct, tag="text", tag_field="type"):
    data: str
    media_type: Literal["text/plain"] = "text/plain"


class ImageBlock(msgspec.Struct, tag="image", tag_field="type"):
    source: Base64Image | UrlSource | FileSource


class ContentSource(msgspec.Struct, tag="content", tag_field="type"):
    """A document given as content blocks of its own."""

    content: str | list[TextBlock | ImageBlock]


class DocumentBlock(msgspec.Struct, tag="document", tag_field="type", omit_defaults=True):
    source: Base64Pdf | UrlSource | PlainTextSource | ContentSource | FileSource
    title: str | UnsetType | None = UNSET
    context: str | UnsetType | None = UNSET


class ToolUseBlock(msgspec.Struct, tag="tool_use", tag_field="type"):
    """A tool call of an earlier assistant turn, sent back as history."""

    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(msgspec.Struct, tag="tool_result", tag_field="type", omit_defaults=True):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock | DocumentBlock] = ""
    is_error: bool | UnsetType | None = UNSET


class ThinkingBlock(msgspec.Struct, tag="thinking", tag_field="type"):
    """An earlier turn's thinking, sent back as history (not forwarded)."""

    thinking: str
    signature: str = ""


class RedactedThinkingBlock(msgspec.Struct, tag="redacted_thinking", tag_field="type"):
    data: str


Block = (
    TextBlock
    | ImageBlock
    | DocumentBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
)
"""Every block a turn may hold; a block of any other type is a 400 naming its path."""


class MessageParam(msgspec.Struct):
    """A turn. ``system`` among the turns is not in Anthropic's documentation, but Claude
    Code sends one (instructions added mid-conversation): read as a system message there."""

    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


# -- tools ----------------------------------------------------------------------------------


class ToolParam(msgspec.Struct, omit_defaults=True):
    """A tool: a client tool (no type, or ``custom``) has ``input_schema``; any other type is
    a server tool (web search, code execution, bash, text editor, computer…), refused."""

    name: str
    type: str | UnsetType | None = UNSET
    description: str | UnsetType | None = UNSET
    input_schema: dict[str, Any] | UnsetType | None = UNSET


class ToolChoiceParam(msgspec.Struct, omit_defaults=True):
    type: Literal["auto", "any", "tool", "none"]
    name: str | UnsetType = UNSET
    disable_parallel_tool_use: bool | UnsetType | None = UNSET


class Metadata(msgspec.Struct, omit_defaults=True):
    user_id: str | UnsetType | None = UNSET


# accepted and not forwarded (``app.apis.messages.request``); the docstring is the document's
class ThinkingParam(msgspec.Struct, omit_defaults=True):
    """Extended thinking (docs/api.md, Anthropic Messages)."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | UnsetType | None = UNSET


class JsonOutputFormat(msgspec.Struct, tag="json_schema", tag_field="type"):
    """Structured outputs: the reply is JSON that fits ``schema`` (a JSON object, or the
    400 names ``output_config.format.schema``)."""

    schema: dict[str, Any]


class OutputConfig(msgspec.Struct, omit_defaults=True):
    """``output_config``: its ``format`` becomes the chat request's ``response_format``
    (``app.apis.messages.request``); its other fields (``effort``, ...) are not read, and reach
    only a provider that serves the Messages API, with the rest of ``output_config``."""

    format: JsonOutputFormat | UnsetType | None = UNSET


# -- the requests ---------------------------------------------------------------------------


class CountTokensRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``POST /v1/messages/count_tokens``: a Messages request without its output settings
    (they are read, and ignored, when a client sends the same body to both)."""

    model: str
    messages: list[MessageParam]
    system: str | list[TextBlock] | UnsetType | None = UNSET
    tools: list[ToolParam] | UnsetType | None = UNSET
    tool_choice: ToolChoiceParam | UnsetType | None = UNSET
    thinking: ThinkingParam | UnsetType | None = UNSET
    # Read only to be refused: tools Anthropic's servers run, and the state they keep.
    mcp_servers: list[Any] | UnsetType | None = UNSET
    container: Any | UnsetType = UNSET


class MessagesRequest(CountTokensRequest, kw_only=True, omit_defaults=True):
    """``POST /v1/messages`` as a client sends it."""

    max_tokens: OutputTokens
    stop_sequences: list[str] | UnsetType | None = UNSET
    temperature: AnthropicTemperature | UnsetType | None = UNSET
    top_p: TopP | UnsetType | None = UNSET
    top_k: TopK | UnsetType | None = UNSET
    metadata: Metadata | UnsetType | None = UNSET
    stream: bool | UnsetType | None = UNSET
    output_config: OutputConfig | UnsetType | None = UNSET


class _Written(msgspec.Struct, forbid_unknown_fields=True):
    """What svc writes: closed components (an upstream's extra field fails the document)."""


class CountTokensResponse(_Written):
    """The answer of ``POST /v1/messages/count_tokens``."""

    input_tokens: int


# -- the stream's events --------------------------------------------------------------------

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"]


class StartUsage(_Written):
    """The usage ``message_start`` carries: the input counts of a provider that serves the
    Messages API, as its own ``message_start`` gave them, else nothing counted yet (a chat
    upstream reports at the end); ``message_delta`` carries every count billed."""

    input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    output_tokens: int = 0


class StartMessage(_Written, kw_only=True):
    """The message as ``message_start`` tells it (in Anthropic's field order)."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    content: list[Any] = msgspec.field(default_factory=list)
    model: str
    stop_reason: None = None
    stop_sequence: None = None
    usage: StartUsage = msgspec.field(default_factory=StartUsage)


class MessageStart(_Written, tag="message_start", tag_field="type"):
    message: StartMessage


class Ping(_Written, tag="ping", tag_field="type"):
    pass


class TextContent(_Written, tag="text", tag_field="type"):
    text: str = ""


class ToolUseContent(_Written, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: dict[str, Any] = msgspec.field(default_factory=dict)


class ContentBlockStart(_Written, tag="content_block_start", tag_field="type"):
    index: int
    content_block: TextContent | ToolUseContent


class TextDelta(_Written, tag="text_delta", tag_field="type"):
    text: str


class InputJsonDelta(_Written, tag="input_json_delta", tag_field="type"):
    partial_json: str


class ContentBlockDelta(_Written, tag="content_block_delta", tag_field="type"):
    index: int
    delta: TextDelta | InputJsonDelta


class ContentBlockStop(_Written, tag="content_block_stop", tag_field="type"):
    index: int


class StopDelta(_Written):
    stop_reason: StopReason
    stop_sequence: str | None = None


class DeltaUsage(_Written, kw_only=True):
    """The usage billed: ``input_tokens`` are the prompt's uncached tokens, as Anthropic
    counts them (the three input counts add up to the prompt tokens billed)."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    output_tokens: int


class MessageDelta(_Written, tag="message_delta", tag_field="type"):
    delta: StopDelta
    usage: DeltaUsage


class MessageStop(_Written, tag="message_stop", tag_field="type"):
    svc: SvcMetadata


class AnthropicErrorDetail(_Written):
    type: str
    message: str


class ErrorEvent(_Written, tag="error", tag_field="type", omit_defaults=True):
    """A failure after the stream began (``event: error``): the SDKs raise it. ``svc`` is
    there when the stream was settled (charged for what was delivered)."""

    error: AnthropicErrorDetail
    svc: SvcMetadata | UnsetType = UNSET


StreamEvent = (
    MessageStart
    | Ping
    | ContentBlockStart
    | ContentBlockDelta
    | ContentBlockStop
    | MessageDelta
    | MessageStop
    | ErrorEvent
)
"""Every event svc writes on this route, as a type (the unit tests decode the stream with
it)."""


# written by ``app.apis.messages.errors``; the docstring is the document's
class AnthropicErrorBody(_Written, tag="error", tag_field="type"):
    """Anthropic's error body: a refused request on the Messages API's routes."""

    error: AnthropicErrorDetail
    request_id: str | None = None
