"""The Responses API request, as svc reads it (``POST /v1/responses``).

Modelled field by field, as OpenAI documents them: what svc serves is typed and checked
on decoding (a wrong type or value is a 400 naming the field); what needs state svc does
not keep (``previous_response_id``, ``conversation``, ``background``, stored prompts) is
read only to be refused by name; a field svc does not know is ignored, as in Chat
Completions.

Input items come with a ``type`` or, for a plain message, without one: an item is read as
one struct whose ``type`` defaults to ``message``, and ``app.apis.responses.request`` checks the
fields each type needs.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from app.upstream.wire import ReasoningEffort, Temperature, TopP

LEAST_MAX_OUTPUT_TOKENS = 16
"""OpenAI's least ``max_output_tokens``: a provider that serves Responses refuses fewer."""
ResponsesOutputTokens = Annotated[int, msgspec.Meta(ge=LEAST_MAX_OUTPUT_TOKENS)]

# -- content parts --------------------------------------------------------------------------


class InputText(msgspec.Struct, tag="input_text", tag_field="type"):
    text: str


class InputImage(msgspec.Struct, tag="input_image", tag_field="type", omit_defaults=True):
    image_url: str | UnsetType | None = UNSET
    file_id: str | UnsetType | None = UNSET
    detail: Literal["auto", "low", "high"] | UnsetType = UNSET


class InputFile(msgspec.Struct, tag="input_file", tag_field="type", omit_defaults=True):
    file_data: str | UnsetType | None = UNSET
    file_id: str | UnsetType | None = UNSET
    file_url: str | UnsetType | None = UNSET
    filename: str | UnsetType | None = UNSET


class OutputText(msgspec.Struct, tag="output_text", tag_field="type"):
    """An assistant's earlier text, sent back as history."""

    text: str


class RefusalContent(msgspec.Struct, tag="refusal", tag_field="type"):
    refusal: str


class ReasoningText(msgspec.Struct, tag="reasoning_text", tag_field="type"):
    """Part of a reasoning item sent back as history (not forwarded)."""

    text: str


InputPart = InputText | InputImage | InputFile | OutputText | RefusalContent | ReasoningText


# -- input items ----------------------------------------------------------------------------


class InputItem(msgspec.Struct, omit_defaults=True):
    """Any input item: a message (typed ``message`` or not typed at all), a
    ``function_call`` an earlier response made, its ``function_call_output``, or a
    ``reasoning`` item (history, not forwarded)."""

    type: str = "message"
    role: Literal["user", "assistant", "system", "developer"] | UnsetType = UNSET
    content: str | list[InputPart] | UnsetType = UNSET
    call_id: str | UnsetType = UNSET
    name: str | UnsetType = UNSET
    arguments: str | UnsetType = UNSET
    namespace: str | UnsetType = UNSET  # a function_call to a tool of a namespace tool
    output: str | list[InputPart] | UnsetType = UNSET
    id: str | UnsetType | None = UNSET
    status: str | UnsetType | None = UNSET


# -- tools and formats ----------------------------------------------------------------------


class ResponsesTool(msgspec.Struct, omit_defaults=True):
    """A tool: a ``function``, a ``namespace`` of functions (its ``tools``), or another
    type, hosted or not (``app.apis.responses.tools`` says which are served, left out or
    refused)."""

    type: str
    name: str | UnsetType = UNSET
    description: str | UnsetType | None = UNSET
    parameters: dict[str, Any] | UnsetType | None = UNSET
    strict: bool | UnsetType | None = UNSET
    tools: list[ResponsesTool] | UnsetType | None = UNSET


class ToolChoiceObject(msgspec.Struct, omit_defaults=True):
    type: str
    name: str | UnsetType = UNSET


class TextFormatConfig(msgspec.Struct, omit_defaults=True):
    type: Literal["text", "json_object", "json_schema"]
    name: str | UnsetType = UNSET
    schema: dict[str, Any] | UnsetType = UNSET
    description: str | UnsetType | None = UNSET
    strict: bool | UnsetType | None = UNSET


class TextConfig(msgspec.Struct, omit_defaults=True):
    format: TextFormatConfig | UnsetType = UNSET
    verbosity: Literal["low", "medium", "high"] | UnsetType | None = UNSET


class ReasoningConfig(msgspec.Struct, omit_defaults=True):
    effort: ReasoningEffort | UnsetType | None = UNSET
    summary: str | UnsetType | None = UNSET


# -- the request ----------------------------------------------------------------------------


class ResponsesRequest(msgspec.Struct, omit_defaults=True):
    """``POST /v1/responses`` as a client sends it."""

    model: str
    input: str | list[InputItem]
    instructions: str | UnsetType | None = UNSET
    tools: list[ResponsesTool] | UnsetType | None = UNSET
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceObject | UnsetType = UNSET
    parallel_tool_calls: bool | UnsetType | None = UNSET
    max_output_tokens: ResponsesOutputTokens | UnsetType | None = UNSET
    temperature: Temperature | UnsetType | None = UNSET
    top_p: TopP | UnsetType | None = UNSET
    text: TextConfig | UnsetType | None = UNSET
    reasoning: ReasoningConfig | UnsetType | None = UNSET
    user: str | UnsetType | None = UNSET
    safety_identifier: str | UnsetType | None = UNSET
    metadata: dict[str, str] | UnsetType | None = UNSET
    store: bool | UnsetType | None = UNSET
    service_tier: str | UnsetType | None = UNSET
    stream: bool | UnsetType | None = UNSET
    include: list[str] | UnsetType | None = UNSET
    truncation: Literal["auto", "disabled"] | UnsetType | None = UNSET
    # Read only to be refused: they need responses or conversations kept by the server.
    previous_response_id: str | UnsetType | None = UNSET
    conversation: Any | UnsetType = UNSET
    background: bool | UnsetType | None = UNSET
    prompt: Any | UnsetType = UNSET
