"""A Responses API request read and translated into svc's chat completion
(``app.apis.responses.request``): what reaches the upstream, and what is refused by name."""

from __future__ import annotations

import json
from typing import Any

import pytest
from msgspec import UNSET

from app.apis.chat.request import parse_chat_request
from app.apis.responses.request import ResponsesParams, parse_responses_request
from app.apis.responses.tools import OMITTED_TOOLS_HEADER
from app.completion.catalog import default_catalog
from app.completion.request import CLAMPED_HEADER
from app.core.errors import ApiError
from app.upstream.wire import (
    FilePart,
    ImagePart,
    JsonSchemaResponseFormat,
    NamedToolChoice,
    TextPart,
)

ALIASES = default_catalog().aliases
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}


def _parse(body: dict[str, Any]) -> ResponsesParams:
    return parse_responses_request(
        json.dumps(body).encode(),
        ALIASES,
        max_messages=2048,
        max_message_chars=1_000_000,
        image_token_bound=4_096,
    )


def _refused(body: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as info:
        _parse(body)
    assert info.value.status == 400
    return info.value


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    params = _parse({"model": "svc-fast", "input": "Hi", "instructions": "Be brief."})
    messages = params.chat.request.messages
    assert [(m.role, m.content) for m in messages] == [("system", "Be brief."), ("user", "Hi")]
    assert params.chat.requested == "svc-fast"
    assert params.settings.instructions == "Be brief."


def test_the_prompt_is_bounded_and_estimated_as_the_same_chat_request_would_be() -> None:
    body = {"model": "svc-fast", "input": [{"role": "user", "content": "Hello there"}]}
    responses = _parse(body).chat
    chat = parse_chat_request(
        json.dumps({"model": "svc-fast", "messages": body["input"]}).encode(), ALIASES
    )
    assert responses.prompt_tokens == chat.prompt_tokens
    # the bound counts the body's bytes: the same order, a few bytes apart
    assert abs(responses.prompt_token_bound - chat.prompt_token_bound) <= 4


def test_items_become_messages_with_parts_tool_calls_and_tool_results() -> None:
    params = _parse(
        {
            "model": "svc-fast",
            "input": [
                {"type": "message", "role": "developer", "content": "Use tools."},
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is this?"},
                        {"type": "input_image", "image_url": "https://example.com/a.png"},
                        {
                            "type": "input_file",
                            "filename": "a.pdf",
                            "file_data": "data:application/pdf;base64,JVBERi0=",
                        },
                    ],
                },
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "get_weather",
                    "arguments": '{"city":"Paris"}',
                },
                {
                    "type": "function_call",
                    "call_id": "call_2",
                    "name": "get_weather",
                    "arguments": '{"city":"Rome"}',
                },
                {"type": "function_call_output", "call_id": "call_1", "output": "20C"},
                {
                    "type": "function_call_output",
                    "call_id": "call_2",
                    "output": [{"type": "input_text", "text": "25C"}],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Warm.", "annotations": []}],
                },
            ],
            "tools": [WEATHER],
        }
    )
    messages = params.chat.request.messages
    assert [m.role for m in messages] == [
        "developer",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    parts = messages[1].content
    assert isinstance(parts, list)
    assert [type(p) for p in parts] == [TextPart, ImagePart, FilePart]
    calls = messages[2].tool_calls
    assert calls is not UNSET
    assert [(c.id, c.function.arguments) for c in calls] == [
        ("call_1", '{"city":"Paris"}'),
        ("call_2", '{"city":"Rome"}'),
    ]
    assert (messages[3].tool_call_id, messages[3].content) == ("call_1", "20C")
    assert (messages[4].tool_call_id, messages[4].content) == ("call_2", "25C")
    assert messages[5].content == "Warm."


@pytest.mark.parametrize("effort", ["none", "minimal", "low", "medium", "high", "xhigh"])
def test_every_reasoning_effort_openai_takes_is_passed_on(effort: str) -> None:
    """Codex CLI sends ``xhigh`` and ``none`` to the newest models: not a 400."""
    params = _parse({"model": "svc-fast", "input": "Hi", "reasoning": {"effort": effort}})
    assert params.chat.request.reasoning_effort == effort


def test_tools_formats_and_settings_take_their_chat_form() -> None:
    params = _parse(
        {
            "model": "svc-fast",
            "input": "Hi",
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False,
            "max_output_tokens": 50,
            "temperature": 0.2,
            "top_p": 0.5,
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
            "reasoning": {"effort": "low"},
            "user": "u1",
            "safety_identifier": "s1",
            "metadata": {"k": "v"},
            "store": True,
            "stream": False,
            "include": ["reasoning.encrypted_content"],
        }
    )
    req = params.chat.request
    assert req.tools is not UNSET
    assert req.tools[0].function.name == "get_weather"
    assert req.tools[0].function.strict is True
    assert isinstance(req.tool_choice, NamedToolChoice)
    assert req.parallel_tool_calls is False
    assert isinstance(req.response_format, JsonSchemaResponseFormat)
    assert req.response_format.json_schema.name == "w"
    assert (req.temperature, req.top_p, req.reasoning_effort) == (0.2, 0.5, "low")
    assert (req.user, req.safety_identifier) == ("u1", "s1")
    assert req.metadata is UNSET  # the client's tags are echoed, not sent upstream
    assert params.chat.max_tokens == 50
    settings = params.settings
    assert settings.metadata == {"k": "v"}
    assert settings.tool_choice == {"type": "function", "name": "get_weather"}
    assert settings.tools[0]["name"] == "get_weather"
    assert settings.text == {
        "format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}
    }
    assert settings.parallel_tool_calls is False


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"background": True}, "background"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"tools": [{"type": "local_shell"}]}, "tools[0].type"),
        ({"tools": [WEATHER, {"type": "custom", "name": "apply_patch"}]}, "tools[1].type"),
        ({"tools": [{"type": "web_search"}], "tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": {"type": "web_search_preview"}}, "tool_choice.type"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "x"}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
        ({"input": [{"role": "user"}]}, "input[0].content"),
        ({"input": [{"content": "hi"}]}, "input[0].role"),
        (
            {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "input[0].call_id",
        ),
        ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output"),
        ({"input": []}, "input"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": 15}, "max_output_tokens"),
        ({"temperature": 3}, "temperature"),
        ({"text": {"format": {"type": "json_schema"}}}, "text.format.name"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].image_url",
        ),
        (
            {"input": [{"role": "system", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "input[0].content",
        ),
    ],
)
def test_what_svc_cannot_serve_is_refused_by_name(body: dict[str, Any], param: str) -> None:
    error = _refused({"model": "svc-fast", "input": "Hi", **body})
    assert error.param == param
    assert error.message


def test_an_output_limit_above_the_alias_is_lowered_to_it_and_echoed() -> None:
    limit = ALIASES["svc-fast"].max_output_tokens
    params = _parse({"model": "svc-fast", "input": "Hi", "max_output_tokens": 10**9})
    assert params.chat.max_tokens == limit
    assert params.chat.headers == ((CLAMPED_HEADER, str(limit)),)
    assert params.settings.max_output_tokens == limit  # the response says what it was served
    kept = _parse({"model": "svc-fast", "input": "Hi", "max_output_tokens": limit})
    assert (kept.chat.max_tokens, kept.chat.headers) == (limit, ())
    # beside the hosted tools left out, each header says its own
    both = _parse(
        {
            "model": "svc-fast",
            "input": "Hi",
            "max_output_tokens": 10**9,
            "tools": [{"type": "web_search"}],
        }
    )
    assert dict(both.chat.headers) == {
        CLAMPED_HEADER: str(limit),
        OMITTED_TOOLS_HEADER: "web_search",
    }


def test_an_unknown_model_is_the_same_404_as_in_chat_completions() -> None:
    with pytest.raises(ApiError) as info:
        _parse({"model": "gpt-9", "input": "Hi"})
    assert info.value.status == 404
    assert info.value.param == "model"


def test_svc_auto_is_resolved_as_in_chat_completions() -> None:
    params = _parse({"model": "svc-auto", "input": "Write a Python function to sort a list."})
    assert params.chat.requested == "svc-auto"
    assert params.chat.alias.id != "svc-auto"
