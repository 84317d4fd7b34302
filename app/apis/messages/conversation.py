"""A Messages request's conversation and tools as Chat Completions has them (the rules
are ``app.apis.messages.request``'s docstring): its turns as messages, its blocks as
parts, its tools as function tools."""

from __future__ import annotations

import msgspec
from msgspec import UNSET

from app.apis.messages.wire import (
    Base64Image,
    Base64Pdf,
    Block,
    ContentSource,
    DocumentBlock,
    FileSource,
    ImageBlock,
    MessageParam,
    PlainTextSource,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolChoiceParam,
    ToolParam,
    ToolResultBlock,
    ToolUseBlock,
    UrlSource,
)
from app.core.errors import invalid_value
from app.upstream.wire import (
    ContentPart,
    FilePart,
    FileRef,
    FunctionCall,
    FunctionDefinition,
    ImagePart,
    ImageUrl,
    Message,
    NamedFunction,
    NamedToolChoice,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
)

MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""Anthropic's limit on one image of a request made through its API (decoded bytes)."""
DEFAULT_PDF_NAME = "document.pdf"
_NO_FILES = "svc does not keep files: send the content itself (a base64 source, or the text)."


# -- the conversation -----------------------------------------------------------------------


def system_messages(system: str | list[TextBlock] | object) -> list[Message]:
    if isinstance(system, str):
        return [Message(role="system", content=system)] if system else []
    if isinstance(system, list) and system:
        return [Message(role="system", content=[TextPart(text=b.text) for b in system])]
    return []


def add_turn(messages: list[Message], turn: MessageParam, where: str) -> None:
    content = turn.content
    if isinstance(content, str):
        if not content and turn.role == "user":
            raise invalid_value(f"{where}.content", "A user turn's content must not be empty.")
        messages.append(Message(role=turn.role, content=content))
        return
    if not content:
        raise invalid_value(f"{where}.content", "A turn's content must not be empty.")
    if turn.role == "system":
        messages.append(_system_turn(content, where))
    elif turn.role == "assistant":
        messages.append(_assistant(content, where))
    else:
        _add_user_turn(messages, content, where)


def _system_turn(blocks: list[Block], where: str) -> Message:
    """A system turn among the others: its text blocks, as a system message in its place."""
    parts: list[ContentPart] = []
    for j, block in enumerate(blocks):
        if not isinstance(block, TextBlock):
            raise invalid_value(
                f"{where}.content[{j}].type",
                f"A system turn holds text blocks only, not '{_block_type(block)}'.",
            )
        parts.append(TextPart(text=block.text))
    return Message(role="system", content=parts)


def _assistant(blocks: list[Block], where: str) -> Message:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for j, block in enumerate(blocks):
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            arguments = msgspec.json.encode(block.input).decode()
            calls.append(ToolCall(id=block.id, function=FunctionCall(block.name, arguments)))
        elif not isinstance(block, ThinkingBlock | RedactedThinkingBlock):
            raise invalid_value(
                f"{where}.content[{j}].type",
                "An assistant turn holds text, tool_use and thinking blocks; "
                f"'{_block_type(block)}' blocks belong in a user turn.",
            )
    text = "".join(texts)
    if calls:
        return Message(role="assistant", content=text or None, tool_calls=calls)
    return Message(role="assistant", content=text)


def _add_user_turn(messages: list[Message], blocks: list[Block], where: str) -> None:
    """The turn's tool results as tool messages, then the rest as one user message."""
    parts: list[ContentPart] = []
    carried: list[ContentPart] = []  # what tool results hold besides text
    results: list[Message] = []
    for j, block in enumerate(blocks):
        at = f"{where}.content[{j}]"
        if isinstance(block, ToolResultBlock):
            results.append(_tool_result(block, at, carried))
        elif isinstance(block, TextBlock):
            parts.append(TextPart(text=block.text))
        elif isinstance(block, ImageBlock):
            parts.append(_image(block, at))
        elif isinstance(block, DocumentBlock):
            parts.extend(_document(block, at))
        else:
            raise invalid_value(
                f"{at}.type",
                f"'{_block_type(block)}' blocks belong in an assistant turn; a user turn holds "
                "text, image, document and tool_result blocks.",
            )
    messages.extend(results)
    if carried or parts:
        messages.append(Message(role="user", content=carried + parts))


def _tool_result(block: ToolResultBlock, where: str, carried: list[ContentPart]) -> Message:
    """A tool message of the result's text; its images and documents go to ``carried``."""
    content = block.content
    if isinstance(content, str):
        return Message(role="tool", tool_call_id=block.tool_use_id, content=content)
    texts = []
    for k, item in enumerate(content):
        at = f"{where}.content[{k}]"
        if isinstance(item, TextBlock):
            texts.append(item.text)
        elif isinstance(item, ImageBlock):
            carried.append(_image(item, at))
        else:
            carried.extend(_document(item, at))
    return Message(role="tool", tool_call_id=block.tool_use_id, content="\n".join(texts))


def _image(block: ImageBlock, where: str) -> ImagePart:
    source = block.source
    if isinstance(source, Base64Image):
        if _decoded_size(source.data) > MAX_IMAGE_BYTES:
            raise invalid_value(
                f"{where}.source.data",
                f"An image may hold at most {MAX_IMAGE_BYTES // (1024 * 1024)} MB.",
            )
        url = f"data:{source.media_type};base64,{source.data}"
        return ImagePart(image_url=ImageUrl(url=url))
    if isinstance(source, UrlSource):
        if not source.url.startswith(("https://", "http://")):
            raise invalid_value(f"{where}.source.url", "An image URL must be an http(s) URL.")
        return ImagePart(image_url=ImageUrl(url=source.url))
    raise invalid_value(f"{where}.source", _NO_FILES)


def _document(block: DocumentBlock, where: str) -> list[ContentPart]:
    source = block.source
    parts: list[ContentPart]
    if isinstance(source, Base64Pdf):
        name = block.title if isinstance(block.title, str) and block.title else DEFAULT_PDF_NAME
        data = f"data:application/pdf;base64,{source.data}"
        parts = [FilePart(file=FileRef(file_data=data, filename=name))]
    elif isinstance(source, PlainTextSource):
        parts = [TextPart(text=source.data)]
    elif isinstance(source, ContentSource):
        content = source.content
        if isinstance(content, str):
            parts = [TextPart(text=content)]
        else:
            parts = [
                TextPart(text=item.text)
                if isinstance(item, TextBlock)
                else _image(item, f"{where}.source.content[{k}]")
                for k, item in enumerate(content)
            ]
    elif isinstance(source, UrlSource):
        raise invalid_value(
            f"{where}.source",
            "svc does not fetch documents: send the PDF as a base64 source, or the text.",
        )
    else:
        assert isinstance(source, FileSource)
        raise invalid_value(f"{where}.source", _NO_FILES)
    if isinstance(block.context, str) and block.context:
        parts.append(TextPart(text=block.context))
    return parts


def _decoded_size(data: str) -> int:
    """The bytes base64 ``data`` decodes to (its padding aside)."""
    return len(data) * 3 // 4 - data[-2:].count("=")


def _block_type(block: Block) -> str:
    return str(block.__struct_config__.tag)


# -- tools ----------------------------------------------------------------------------------


def chat_tools(tools: list[ToolParam]) -> list[Tool]:
    out = []
    for i, tool in enumerate(tools):
        if tool.type not in (UNSET, None, "custom"):
            raise invalid_value(
                f"tools[{i}].type",
                f"svc serves client tools only; '{str(tool.type)[:64]}' is a server tool, "
                "which svc does not run.",
            )
        if not isinstance(tool.input_schema, dict):
            raise invalid_value(f"tools[{i}].input_schema", "A tool needs 'input_schema'.")
        fields: dict[str, object] = {"name": tool.name, "parameters": tool.input_schema}
        if isinstance(tool.description, str):
            fields["description"] = tool.description
        try:
            definition = msgspec.convert(fields, FunctionDefinition)
        except msgspec.ValidationError:
            raise invalid_value(
                f"tools[{i}].name",
                "A tool's name is 1 to 64 letters, digits, underscores or hyphens.",
            ) from None
        out.append(Tool(function=definition))
    return out


def chat_tool_choice(
    choice: ToolChoiceParam | object, has_tools: bool
) -> tuple[ToolChoice | msgspec.UnsetType, bool | msgspec.UnsetType]:
    """The chat request's ``tool_choice`` and ``parallel_tool_calls``."""
    if not isinstance(choice, ToolChoiceParam):
        return UNSET, UNSET
    parallel: bool | msgspec.UnsetType = UNSET
    if choice.disable_parallel_tool_use is True and has_tools:
        parallel = False
    if choice.type == "any":
        return "required", parallel
    if choice.type == "tool":
        if not isinstance(choice.name, str):
            raise invalid_value("tool_choice.name", "A tool_choice of type 'tool' needs 'name'.")
        return NamedToolChoice(function=NamedFunction(name=choice.name)), parallel
    if not has_tools:
        return UNSET, UNSET  # auto and none say nothing without tools
    return choice.type, parallel
