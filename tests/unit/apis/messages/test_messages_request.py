"""A Messages API request read and translated into svc's chat completion
(``app.apis.messages.request``): what reaches the upstream, and what is refused by name."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from msgspec import UNSET

from app.apis.chat.request import parse_chat_request
from app.apis.messages import conversation
from app.apis.messages.request import (
    count_tokens,
    parse_count_tokens_request,
    parse_messages_request,
)
from app.completion.catalog import default_catalog
from app.completion.request import CLAMPED_HEADER, CompletionRequest
from app.core.errors import ApiError
from app.kv.fields import API_MESSAGES, APIS
from app.upstream.wire import FilePart, ImagePart, ImageUrl, Message, NamedToolChoice, TextPart

ALIASES = default_catalog().aliases
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
PNG = "iVBORw0KGgo="  # base64 of a few bytes


def _parse(body: dict[str, Any], **limits: Any) -> CompletionRequest:
    request = {"model": "svc-fast", "max_tokens": 256, **body}
    return parse_messages_request(
        json.dumps(request).encode(),
        ALIASES,
        max_messages=limits.get("max_messages", 2048),
        max_message_chars=limits.get("max_message_chars", 1_000_000),
        image_token_bound=4_096,
        identify=limits.get("identify"),
    )


def _messages(body: dict[str, Any]) -> list[Message]:
    return _parse(body).request.messages


def _refused(body: dict[str, Any], param: str, **limits: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        _parse(body, **limits)
    assert info.value.param == param, info.value.message
    assert info.value.status in (400, 404)
    return info.value


def _user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def test_a_text_conversation_is_the_chat_request_of_the_same_turns() -> None:
    params = _parse(
        {
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Again"},
            ],
        }
    )
    assert [(m.role, m.content) for m in params.request.messages] == [
        ("system", "Be brief."),
        ("user", "Hi"),
        ("assistant", "Hello."),
        ("user", "Again"),
    ]
    assert params.api == API_MESSAGES == "messages"
    assert API_MESSAGES in APIS
    assert (params.requested, params.alias.id, params.models) == ("svc-fast",) * 3
    assert params.max_tokens == 256  # the client's output limit
    # Anthropic's sampling default, not the chat path's 0.7
    assert (params.request.temperature, params.request.top_p) == (1.0, 1.0)
    assert params.native is None


def test_system_blocks_are_one_system_message_of_text_parts() -> None:
    system = [
        {"type": "text", "text": "One.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Two."},
    ]
    (first, _) = _messages({"system": system, "messages": [{"role": "user", "content": "Hi"}]})
    assert first.role == "system"
    assert first.content == [TextPart("One."), TextPart("Two.")]


def test_a_system_turn_among_the_messages_is_a_system_message_in_its_place() -> None:
    """Claude Code sends one (instructions added mid-conversation), as text or blocks."""
    messages = _messages(
        {
            "system": "First.",
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "system", "content": [{"type": "text", "text": "Now be terse."}]},
                {"role": "system", "content": "And polite."},
                {"role": "user", "content": "Again"},
            ],
        }
    )
    assert [(m.role, m.content) for m in messages] == [
        ("system", "First."),
        ("user", "Hi"),
        ("system", [TextPart("Now be terse.")]),
        ("system", "And polite."),
        ("user", "Again"),
    ]


def _image_block() -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}


def test_images_are_image_url_parts_and_base64_is_a_data_url() -> None:
    (message,) = _messages(
        {
            "messages": [
                _user(
                    {"type": "text", "text": "Compare"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}},
                )
            ]
        }
    )
    assert message.content == [
        TextPart("Compare"),
        ImagePart(ImageUrl(url=f"data:image/png;base64,{PNG}")),
        ImagePart(ImageUrl(url="https://x.test/a.jpg")),
    ]


def test_documents_are_file_parts_or_text() -> None:
    (message,) = _messages(
        {
            "messages": [
                _user(
                    {
                        "type": "document",
                        "source": {
                            "type": "base64",
                            "media_type": "application/pdf",
                            "data": "JVBERi0=",
                        },
                        "title": "report.pdf",
                        "context": "Q3 figures",
                        "citations": {"enabled": True},
                    },
                    {
                        "type": "document",
                        "source": {
                            "type": "base64",
                            "media_type": "application/pdf",
                            "data": "JVBERi0=",
                        },
                    },
                    {
                        "type": "document",
                        "source": {
                            "type": "text",
                            "media_type": "text/plain",
                            "data": "plain words",
                        },
                    },
                    {
                        "type": "document",
                        "source": {
                            "type": "content",
                            "content": [
                                {"type": "text", "text": "chunk one"},
                                {
                                    "type": "image",
                                    "source": {"type": "url", "url": "https://x.test/i.png"},
                                },
                            ],
                        },
                    },
                    {"type": "document", "source": {"type": "content", "content": "all of it"}},
                )
            ]
        }
    )
    assert isinstance(message.content, list)
    first, context, second, plain, chunk, image, whole = message.content
    assert isinstance(first, FilePart)
    assert isinstance(second, FilePart)
    assert first.file.file_data == "data:application/pdf;base64,JVBERi0="
    assert (first.file.filename, second.file.filename) == ("report.pdf", "document.pdf")
    assert context == TextPart("Q3 figures")
    assert (plain, chunk, whole) == (
        TextPart("plain words"),
        TextPart("chunk one"),
        TextPart("all of it"),
    )
    assert isinstance(image, ImagePart)
    assert image.image_url.url == "https://x.test/i.png"


def test_assistant_tool_use_is_a_tool_call_and_thinking_is_left_out() -> None:
    messages = _messages(
        {
            "tools": [WEATHER],
            "messages": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "two calls", "signature": "sig"},
                        {"type": "redacted_thinking", "data": "opaque"},
                        {"type": "text", "text": "Checking."},
                        {
                            "type": "tool_use",
                            "id": "toolu_a",
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        },
                        {
                            "type": "tool_use",
                            "id": "toolu_b",
                            "name": "get_weather",
                            "input": {"city": "Rome"},
                        },
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "toolu_c", "name": "get_weather", "input": {}}
                    ],
                },
            ],
        }
    )
    assistant, only_calls = messages[1], messages[2]
    assert assistant.content == "Checking."
    assert assistant.tool_calls is not UNSET
    assert [
        (c.id, c.function.name, json.loads(c.function.arguments)) for c in assistant.tool_calls
    ] == [
        ("toolu_a", "get_weather", {"city": "Paris"}),
        ("toolu_b", "get_weather", {"city": "Rome"}),
    ]
    # consecutive assistant turns pass as they came; a turn of calls only has no content
    assert only_calls.content is None
    assert only_calls.tool_calls is not UNSET
    assert only_calls.tool_calls[0].function.arguments == "{}"


def test_tool_results_are_tool_messages_before_the_rest_of_the_turn() -> None:
    messages = _messages(
        {
            "messages": [
                {"role": "user", "content": "Look"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "toolu_a", "name": "shot", "input": {}},
                        {"type": "tool_use", "id": "toolu_b", "name": "read", "input": {}},
                    ],
                },
                _user(
                    {"type": "text", "text": "Here you go."},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_a",
                        "content": [
                            {"type": "text", "text": "took it"},
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/jpeg",
                                    "data": PNG,
                                },
                            },
                        ],
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_b",
                        "content": "file text",
                        "is_error": True,
                    },
                    {"type": "text", "text": "What now?"},
                ),
            ]
        }
    )
    assert [(m.role, m.tool_call_id) for m in messages[2:]] == [
        ("tool", "toolu_a"),
        ("tool", "toolu_b"),
        ("user", UNSET),
    ]
    assert (messages[2].content, messages[3].content) == ("took it", "file text")
    user = messages[4].content
    assert isinstance(user, list)
    # the result's image comes first in the user message, then the turn's text in order
    assert isinstance(user[0], ImagePart)
    assert user[0].image_url.url.startswith("data:image/jpeg;base64,")
    assert user[1:] == [TextPart("Here you go."), TextPart("What now?")]


def test_a_turn_of_tool_results_only_is_tool_messages_only() -> None:
    messages = _messages(
        {
            "messages": [
                {"role": "user", "content": "Go"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                },
                _user({"type": "tool_result", "tool_use_id": "t1"}),
            ]
        }
    )
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert messages[2].content == ""


def test_tools_are_function_tools() -> None:
    params = _parse(
        {
            "tools": [WEATHER, {**WEATHER, "name": "other", "type": "custom"}],
            "messages": [_user({"type": "text", "text": "Hi"})],
        }
    )
    tools = params.request.tools
    assert tools is not UNSET
    assert [t.function.name for t in tools] == ["get_weather", "other"]
    assert tools[0].function.parameters == WEATHER["input_schema"]
    assert tools[0].function.description == "The weather in a city"
    assert params.request.tool_choice is UNSET
    assert params.request.parallel_tool_calls is UNSET


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "get_weather"}, NamedToolChoice.__name__),
    ],
)
@pytest.mark.parametrize("disable_parallel", [None, False, True])
def test_every_tool_choice(
    choice: dict[str, Any], expected: str, disable_parallel: bool | None
) -> None:
    if disable_parallel is not None:
        choice = {**choice, "disable_parallel_tool_use": disable_parallel}
    request = _parse(
        {"tools": [WEATHER], "tool_choice": choice, "messages": [{"role": "user", "content": "Hi"}]}
    ).request
    if expected == NamedToolChoice.__name__:
        assert isinstance(request.tool_choice, NamedToolChoice)
        assert request.tool_choice.function.name == "get_weather"
    else:
        assert request.tool_choice == expected
    assert request.parallel_tool_calls == (False if disable_parallel else UNSET)


def test_auto_or_none_without_tools_say_nothing() -> None:
    for kind in ("auto", "none"):
        request = _parse(
            {"tool_choice": {"type": kind}, "messages": [{"role": "user", "content": "Hi"}]}
        ).request
        assert request.tool_choice is UNSET
        assert request.parallel_tool_calls is UNSET


def test_sampling_stop_sequences_and_the_fields_not_forwarded() -> None:
    params = _parse(
        {
            "messages": [{"role": "user", "content": "Hi"}],
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 40,
            "stop_sequences": ["\n\nHuman:", "END"],
            "stream": False,
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "service_tier": "auto",
            "anything_else": {"is": "ignored"},
        }
    )
    request = params.request
    assert (request.temperature, request.top_p, request.stop) == (0.2, 0.9, ["\n\nHuman:", "END"])
    forwarded = msgspec.to_builtins(request)
    for name in (
        "top_k",
        "thinking",
        "service_tier",
        "anything_else",
        "metadata",
        "reasoning_effort",
    ):
        assert name not in forwarded


def test_top_k_reaches_the_chat_request_where_the_alias_allows_it() -> None:
    body = {"model": "svc-fast", "max_tokens": 256, "messages": HI, "top_k": 40}
    allowed = {
        **ALIASES,
        "svc-fast": msgspec.structs.replace(ALIASES["svc-fast"], allow_top_k=True),
    }
    for aliases, sent in ((ALIASES, None), (allowed, 40)):
        params = parse_messages_request(
            json.dumps(body).encode(),
            aliases,
            max_messages=2048,
            max_message_chars=1_000_000,
            image_token_bound=4_096,
        )
        assert msgspec.to_builtins(params.request).get("top_k") == sent


def test_metadata_user_id_is_what_the_safety_identifier_is_made_from() -> None:
    seen: list[str | None] = []

    def identify(client: str | None) -> str:
        seen.append(client)
        return f"acct-{client}"

    body = {"messages": [{"role": "user", "content": "Hi"}], "metadata": {"user_id": "end-user-7"}}
    assert _parse(body, identify=identify).request.safety_identifier == "acct-end-user-7"
    assert (
        _parse({"messages": body["messages"]}, identify=identify).request.safety_identifier
        == "acct-None"
    )
    assert seen == ["end-user-7", None]
    # without an account (no identify), the client's own id is what there is
    assert _parse(body).request.safety_identifier == "end-user-7"


def test_svc_auto_is_resolved_as_on_chat() -> None:
    params = _parse(
        {"model": "svc-auto", "messages": [{"role": "user", "content": "def f(): pass"}]}
    )
    assert params.requested == "svc-auto"
    assert params.alias.id == "svc-code"
    assert "svc-code" in params.models.split()


# -- the prompt's bound and count_tokens ----------------------------------------------------


def test_the_prompt_is_bounded_and_estimated_as_the_same_chat_request_would_be() -> None:
    turns = [{"role": "user", "content": "Hello there, how are you?"}]
    messages = _parse({"messages": turns})
    chat = parse_chat_request(
        json.dumps({"model": "svc-fast", "messages": turns, "max_tokens": 256}).encode(), ALIASES
    )
    assert messages.prompt_tokens == chat.prompt_tokens
    assert abs(messages.prompt_token_bound - chat.prompt_token_bound) <= 8


def test_images_count_toward_the_bound_as_on_chat() -> None:
    text = _parse({"messages": [_user({"type": "text", "text": "Hi"})]})
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG * 100},
    }
    with_image = _parse({"messages": [_user({"type": "text", "text": "Hi"}, image)]})
    assert with_image.media_estimate > 0
    # the image's bound, not its base64 bytes
    assert with_image.prompt_token_bound - text.prompt_token_bound < 4_096 + 200
    assert with_image.prompt_token_bound - text.prompt_token_bound >= 4_096


def test_count_tokens_answers_the_bound_reserved_for_the_prompt() -> None:
    body = {
        "model": "svc-fast",
        "system": "Be brief.",
        "tools": [WEATHER],
        "messages": [{"role": "user", "content": "Hi"}],
    }
    counted = parse_count_tokens_request(
        json.dumps(body).encode(),
        ALIASES,
        max_messages=10,
        max_message_chars=1000,
        image_token_bound=4_096,
    )
    answer = count_tokens(counted)
    assert answer.input_tokens == counted.prompt_token_bound > 0
    assert msgspec.json.encode(answer) == b'{"input_tokens":%d}' % answer.input_tokens
    # the same conversation sent to /v1/messages reserves the same bound (a few bytes apart)
    sent = _parse({k: v for k, v in body.items() if k != "model"})
    # (the bound counts the body's bytes, and this one has max_tokens too)
    assert sent.prompt_token_bound - answer.input_tokens == len(b', "max_tokens": 256')


def test_count_tokens_refuses_what_messages_refuses() -> None:
    body = {
        "model": "svc-fast",
        "messages": [{"role": "user", "content": [{"type": "server_tool_use"}]}],
    }
    with pytest.raises(ApiError) as info:
        parse_count_tokens_request(
            json.dumps(body).encode(),
            ALIASES,
            max_messages=10,
            max_message_chars=1000,
            image_token_bound=1,
        )
    assert info.value.param == "messages[0].content[0].type"


# -- refusals -------------------------------------------------------------------------------

HI = [{"role": "user", "content": "Hi"}]


def test_max_tokens_above_the_alias_is_lowered_to_it() -> None:
    """opencode and Claude Code ask a model they do not know for 32,000 tokens."""
    limit = ALIASES["svc-fast"].max_output_tokens
    params = _parse({"max_tokens": 32_000, "messages": HI})
    assert (params.max_tokens, params.headers) == (limit, ((CLAMPED_HEADER, str(limit)),))
    kept = _parse({"max_tokens": limit, "messages": HI})
    assert (kept.max_tokens, kept.headers) == (limit, ())


def test_max_tokens_is_required() -> None:
    with pytest.raises(ApiError) as info:
        parse_messages_request(
            json.dumps({"model": "svc-fast", "messages": HI}).encode(),
            ALIASES,
            max_messages=10,
            max_message_chars=1000,
            image_token_bound=1,
        )
    assert info.value.param == "max_tokens"
    assert info.value.status == 400


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"model": "claude-sonnet-4"}, "model"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        (
            {"messages": [{"role": "system", "content": [_image_block()]}]},
            "messages[0].content[0].type",
        ),
        ({"messages": [{"role": "user", "content": ""}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": []}]}, "messages[0].content"),
        (
            {"messages": [_user({"type": "server_tool_use", "id": "s", "name": "web_search"})]},
            "messages[0].content[0].type",
        ),
        (
            {"messages": [_user({"type": "tool_use", "id": "t", "name": "f", "input": {}})]},
            "messages[0].content[0].type",
        ),
        (
            {"messages": [_user({"type": "thinking", "thinking": "x"})]},
            "messages[0].content[0].type",
        ),
        (
            {
                "messages": [
                    *HI,
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "image",
                                "source": {"type": "url", "url": "https://x.test/a.png"},
                            }
                        ],
                    },
                ]
            },
            "messages[1].content[0].type",
        ),
        (
            {
                "messages": [
                    *HI,
                    {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
                ]
            },
            "messages[1].content[0].type",
        ),
        ({"messages": [_user({"type": "text"})]}, "messages[0].content[0]"),
        (
            {
                "messages": [
                    _user(
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/bmp", "data": PNG},
                        }
                    )
                ]
            },
            "messages[0].content[0].source.media_type",
        ),
        (
            {
                "messages": [
                    _user({"type": "image", "source": {"type": "file", "file_id": "file_1"}})
                ]
            },
            "messages[0].content[0].source",
        ),
        (
            {
                "messages": [
                    _user({"type": "image", "source": {"type": "url", "url": "file:///etc/passwd"}})
                ]
            },
            "messages[0].content[0].source.url",
        ),
        (
            {
                "messages": [
                    _user(
                        {
                            "type": "document",
                            "source": {"type": "url", "url": "https://x.test/a.pdf"},
                        }
                    )
                ]
            },
            "messages[0].content[0].source",
        ),
        (
            {
                "messages": [
                    _user({"type": "document", "source": {"type": "file", "file_id": "file_1"}})
                ]
            },
            "messages[0].content[0].source",
        ),
        (
            {
                "messages": [
                    _user(
                        {
                            "type": "document",
                            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                        }
                    )
                ]
            },
            "messages[0].content[0].source.media_type",
        ),
        (
            {
                "messages": [
                    _user(
                        {
                            "type": "tool_result",
                            "tool_use_id": "t",
                            "content": [
                                {"type": "image", "source": {"type": "file", "file_id": "f"}}
                            ],
                        }
                    )
                ]
            },
            "messages[0].content[0].content[0].source",
        ),
        (
            {"messages": HI, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            "tools[0].type",
        ),
        ({"messages": HI, "tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools[0].type"),
        ({"messages": HI, "tools": [{"name": "no_schema"}]}, "tools[0].input_schema"),
        ({"messages": HI, "tools": [{**WEATHER, "name": "has spaces"}]}, "tools[0].name"),
        ({"messages": HI, "tool_choice": {"type": "any"}}, "tool_choice"),
        (
            {"messages": HI, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "other"}},
            "tool_choice",
        ),
        ({"messages": HI, "tools": [WEATHER], "tool_choice": {"type": "tool"}}, "tool_choice.name"),
        ({"messages": HI, "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
        ({"messages": HI, "stop_sequences": ["a", "b", "c", "d", "e"]}, "stop_sequences"),
        ({"messages": HI, "temperature": 1.5}, "temperature"),
        ({"messages": HI, "top_k": -1}, "top_k"),
        ({"messages": HI, "metadata": {"user_id": 7}}, "metadata.user_id"),
        (
            {
                "messages": HI,
                "mcp_servers": [{"type": "url", "url": "https://mcp.test", "name": "m"}],
            },
            "mcp_servers",
        ),
        ({"messages": HI, "container": "container_1"}, "container"),
        (
            {
                "messages": HI,
                "system": [{"type": "image", "source": {"type": "url", "url": "https://x.test"}}],
            },
            "system[0].type",
        ),
    ],
)
def test_what_svc_cannot_serve_is_refused_by_name(body: dict[str, Any], param: str) -> None:
    if "messages" not in body:
        body = {**body, "messages": HI}
    _refused(body, param)


def test_the_model_not_found_is_a_404() -> None:
    assert _refused({"model": "nope", "messages": HI}, "model").status == 404


def test_an_image_over_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conversation, "MAX_IMAGE_BYTES", 1024)
    image = {"type": "base64", "media_type": "image/png", "data": "A" * 1368}  # 1,026 bytes
    error = _refused(
        {"messages": [_user({"type": "image", "source": image})]},
        "messages[0].content[0].source.data",
    )
    assert "at most" in error.message
    image["data"] = "A" * 1364 + "AA=="  # 1,024 bytes: allowed
    _parse({"messages": [_user({"type": "image", "source": image})]})


def test_the_message_limits_are_the_chat_paths() -> None:
    turns = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}] * 3
    _refused({"messages": turns}, "messages", max_messages=5)
    _parse({"messages": turns}, max_messages=6)
    error = _refused(
        {"messages": [*HI, {"role": "assistant", "content": "x" * 11}]},
        "messages[1].content",
        max_message_chars=10,
    )
    assert "10 characters" in error.message
    _refused({"system": "y" * 11, "messages": HI}, "system", max_message_chars=10)
    _refused({"messages": HI * 3}, "messages", max_messages=2)
    # a turn of tool results is as many messages: the translated count is held too
    results = _user(*({"type": "tool_result", "tool_use_id": f"t{n}"} for n in range(3)))
    _refused({"messages": [results]}, "messages", max_messages=2)
