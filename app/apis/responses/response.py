"""The Responses API's response object, as its lifecycle events carry it: its state (the
output items closed so far, the usage billed, why it failed or is incomplete, svc's
metadata) and the settings it echoes of its request (``ResponseSettings``, decided once
per request). Its stream is written by ``app.apis.responses.stream.ResponsesStream``.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from app.apis.responses.wire import ResponsesRequest, ResponsesTool, TextConfig, ToolChoiceObject
from app.completion.output import StreamEnd, SvcMetadata
from app.completion.request import CompletionRequest

Status = Literal["in_progress", "completed", "incomplete", "failed"]


class OutputTextPart(msgspec.Struct, kw_only=True):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = msgspec.field(default_factory=list)
    logprobs: list[Any] = msgspec.field(default_factory=list)


class RefusalPart(msgspec.Struct, kw_only=True):
    type: Literal["refusal"] = "refusal"
    refusal: str


class MessageItem(msgspec.Struct, kw_only=True):
    id: str
    type: Literal["message"] = "message"
    status: Status
    role: Literal["assistant"] = "assistant"
    content: list[OutputTextPart | RefusalPart]


class FunctionCallItem(msgspec.Struct, kw_only=True):
    id: str
    type: Literal["function_call"] = "function_call"
    status: Status
    arguments: str
    call_id: str
    name: str
    namespace: str | UnsetType = UNSET
    """The namespace tool ``name`` is a function of, when it is one (as OpenAI's)."""


OutputItem = MessageItem | FunctionCallItem


class InputTokensDetails(msgspec.Struct):
    cached_tokens: int
    cache_write_tokens: int


class OutputTokensDetails(msgspec.Struct):
    reasoning_tokens: int


class ResponseUsage(msgspec.Struct, kw_only=True):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseError(msgspec.Struct):
    code: str
    message: str


class IncompleteDetails(msgspec.Struct):
    reason: Literal["max_output_tokens"]


class Reasoning(msgspec.Struct):
    effort: str | None = None
    summary: str | None = None


class ResponseSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What a response echoes of its request (its model is the alias that served it)."""

    instructions: str | None
    max_output_tokens: int | None
    metadata: dict[str, str]
    parallel_tool_calls: bool
    reasoning: Reasoning
    temperature: float
    text: dict[str, Any]
    tool_choice: Any
    tools: list[dict[str, Any]]
    top_p: float
    truncation: str
    user: str | None
    safety_identifier: str | None

    @classmethod
    def of(cls, req: ResponsesRequest, params: CompletionRequest) -> ResponseSettings:
        chat = params.request
        text: dict[str, Any] = {"format": {"type": "text"}}
        if isinstance(req.text, TextConfig) and req.text.format is not UNSET:
            text = {"format": msgspec.to_builtins(req.text.format)}
        reasoning = req.reasoning or None
        choice = req.tool_choice
        return cls(
            instructions=req.instructions if isinstance(req.instructions, str) else None,
            max_output_tokens=params.max_tokens,
            metadata=req.metadata if isinstance(req.metadata, dict) else {},
            parallel_tool_calls=req.parallel_tool_calls is not False,
            reasoning=Reasoning(
                effort=reasoning.effort or None if reasoning else None,
                summary=reasoning.summary or None if reasoning else None,
            ),
            temperature=float(chat.temperature),  # type: ignore[arg-type]  # filled in
            text=text,
            tool_choice=(
                msgspec.to_builtins(choice)
                if isinstance(choice, ToolChoiceObject)
                else choice or "auto"
            ),
            tools=_tools_echo(req.tools or []),
            top_p=float(chat.top_p),  # type: ignore[arg-type]  # filled in
            truncation=req.truncation or "disabled",
            user=req.user if isinstance(req.user, str) else None,
            safety_identifier=(
                req.safety_identifier if isinstance(req.safety_identifier, str) else None
            ),
        )


def _tools_echo(tools: list[ResponsesTool]) -> list[dict[str, Any]]:
    """The tools served, as OpenAI echoes them: functions, and namespaces of functions
    (the hosted tools left out are not among them)."""
    echo = []
    for tool in tools:
        if tool.type == "function":
            echo.append(_tool_echo(tool))
        elif tool.type == "namespace":
            echo.append(
                {
                    "type": "namespace",
                    "name": tool.name,
                    "description": tool.description or None,
                    "tools": [_tool_echo(inner) for inner in tool.tools or ()],
                }
            )
    return echo


def _tool_echo(tool: ResponsesTool) -> dict[str, Any]:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description or None,
        "parameters": tool.parameters or None,
        "strict": tool.strict if isinstance(tool.strict, bool) else None,
    }


class ResponseState(msgspec.Struct, kw_only=True):
    """The ``response`` of the lifecycle events is OpenAI's Response: this, its state (and
    svc's metadata on the last one), then the ``ResponseSettings`` it echoes, which are
    encoded once per response and joined on (``ResponsesStream._response``)."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Status
    model: str
    output: list[msgspec.Raw]  # the closed items (OutputItem), each encoded as it closed
    usage: ResponseUsage | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    background: bool = False
    max_tool_calls: int | None = None
    previous_response_id: str | None = None
    service_tier: str = "default"
    store: bool = False
    svc: SvcMetadata | UnsetType = UNSET


def billed_usage(end: StreamEnd) -> ResponseUsage:
    """The usage a response reports: what was billed, with the details the upstream
    reported, each clamped to the count it is part of."""
    reported = end.reported
    prompt_details = (reported and reported.prompt_tokens_details) or {}
    completion_details = (reported and reported.completion_tokens_details) or {}
    return ResponseUsage(
        input_tokens=end.prompt_tokens,
        input_tokens_details=InputTokensDetails(
            cached_tokens=min(prompt_details.get("cached_tokens", 0), end.prompt_tokens),
            cache_write_tokens=min(prompt_details.get("cache_write_tokens", 0), end.prompt_tokens),
        ),
        output_tokens=end.completion_tokens,
        output_tokens_details=OutputTokensDetails(
            min(completion_details.get("reasoning_tokens", 0), end.completion_tokens)
        ),
        total_tokens=end.prompt_tokens + end.completion_tokens,
    )
