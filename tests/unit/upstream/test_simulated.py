"""The simulated upstream: plain text as before, a tool call on a user's turn with tools
(required here; when "auto" calls one: test_simulated_tools), text after a tool's result,
JSON for the JSON response formats, all capped by max_tokens."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema_rs
import msgspec
import pytest

from app.core.errors import UpstreamError
from app.upstream.base import ChoiceEnd, Piece, UpstreamCall, Usage
from app.upstream.simulated import SimulatedProvider, message_text
from app.upstream.wire import ChatRequest, Delta, ToolCallDelta

WEATHER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
SEARCH: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 3, "maxLength": 40},
        "filters": {
            "type": "object",
            "properties": {
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                "since": {"type": ["string", "null"], "format": "date"},
                "exact": {"type": "boolean"},
            },
            "required": ["tags"],
        },
        "limit": {"anyOf": [{"type": "null"}, {"type": "integer", "exclusiveMinimum": 0}]},
        "score": {"type": "number", "exclusiveMaximum": 1, "minimum": 0},
    },
    "required": ["query", "filters", "limit", "score"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "search", "parameters": SEARCH}},
    {"type": "function", "function": {"name": "ping"}},
]
USER_TURN = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOL_RESULT_TURN = [
    *USER_TURN,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "secret: 21 degrees"},
]
CALL_ID = re.compile(r"call_[0-9A-Za-z]{24}")


def _call(max_tokens: int = 1000, **request: Any) -> UpstreamCall:
    body = {"model": "svc-fast", "messages": USER_TURN, **request}
    return UpstreamCall(
        model="simulated",
        request=msgspec.convert(body, ChatRequest),
        max_tokens=max_tokens,
    )


async def _reads(
    call: UpstreamCall, provider: SimulatedProvider | None = None
) -> list[list[Piece]]:
    return [read async for read in (provider or SimulatedProvider()).stream(call)]


async def _pieces(call: UpstreamCall) -> list[Piece]:
    (read,) = await _reads(call)  # no delay: everything in one read
    return read


def _tool_call_pieces(pieces: list[Piece]) -> list[ToolCallDelta]:
    deltas = [p for p in pieces if isinstance(p, Delta) and p.tool_calls]
    return [tool_call for d in deltas for tool_call in d.tool_calls or []]


def _arguments(pieces: list[Piece]) -> str:
    calls = _tool_call_pieces(pieces)
    return "".join(c.function.arguments or "" for c in calls if c.function)


def _text(pieces: list[Piece]) -> str:
    assert all(isinstance(p, str) for p in pieces[:-1])
    return "".join(p for p in pieces if isinstance(p, str))


def _fits(value: Any, schema: dict[str, Any]) -> bool:
    return bool(jsonschema_rs.validator_for(schema, validate_formats=True).is_valid(value))


# -- plain text -----------------------------------------------------------------------------


async def test_plain_text_is_the_same_words_and_usage_as_before() -> None:
    pieces = await _pieces(_call(messages=[{"role": "user", "content": "hi"}]))
    # crc32("hi") % 38 == 4: the words from "quick" on, 24 of them
    assert pieces[:4] == ["quick", " brown", " fox", " jumps"]
    assert len(pieces) == 25
    assert pieces[-1] == Usage(prompt_tokens=4, completion_tokens=24)  # 2 chars // 4 + 4


async def test_max_tokens_caps_plain_text() -> None:
    pieces = await _pieces(_call(max_tokens=5, messages=[{"role": "user", "content": "hi"}]))
    # cut short, it says so as real upstreams do
    finish = Delta(finish_reason="length")
    assert pieces == ["quick", " brown", " fox", " jumps", " over", finish, Usage(4, 5)]


async def test_a_whole_reply_within_max_tokens_ends_plainly() -> None:
    pieces = await _pieces(_call(max_tokens=100, messages=[{"role": "user", "content": "hi"}]))
    assert pieces[-1] == Usage(4, 24)
    assert not any(isinstance(piece, Delta) for piece in pieces)


async def test_a_stop_sequence_ends_the_reply_before_it_and_is_named() -> None:
    hi = [{"role": "user", "content": "hi"}]  # "quick brown fox jumps over the ..."
    pieces = await _pieces(_call(messages=hi, stop=["fox"]))
    assert pieces == ["quick", " brown", " ", ChoiceEnd("fox"), Usage(4, 3)]
    # the one that begins first, whatever the order it was sent in; a piece it begins at
    # the start of is left out
    pieces = await _pieces(_call(messages=hi, stop=[" the", " jumps"]))
    assert pieces == ["quick", " brown", " fox", ChoiceEnd(" jumps"), Usage(4, 3)]
    pieces = await _pieces(_call(messages=hi, stop="quick"))
    assert pieces == [ChoiceEnd("quick"), Usage(4, 0)]


async def test_a_stop_sequence_past_max_tokens_or_not_in_the_reply_changes_nothing() -> None:
    hi = [{"role": "user", "content": "hi"}]
    pieces = await _pieces(_call(max_tokens=2, messages=hi, stop=["fox"]))
    assert pieces == ["quick", " brown", Delta(finish_reason="length"), Usage(4, 2)]
    plain = await _pieces(_call(messages=hi))
    assert await _pieces(_call(messages=hi, stop=["zebra", ""])) == plain


async def test_text_parts_read_as_the_text_they_join_to() -> None:
    as_string = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    as_parts = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "h"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "text", "text": "i"},
            ],
        },
    ]
    assert await _pieces(_call(messages=as_parts)) == await _pieces(_call(messages=as_string))
    assert message_text(_call(messages=as_parts).request.messages[1]) == "hi"


async def test_with_a_delay_each_piece_is_a_read_of_its_own() -> None:
    call = _call(messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    reads = await _reads(call, SimulatedProvider(delay_ms=1))
    length = Delta(finish_reason="length")
    assert reads == [["quick"], [" brown"], [" fox"], [length], [Usage(4, 3)]]
    tool_call = _call(tools=TOOLS, tool_choice="required", max_tokens=3)
    tool_reads = await _reads(tool_call, SimulatedProvider(delay_ms=1))
    assert [len(read) for read in tool_reads] == [1] * 5  # 3 deltas, the finish, the usage


# -- tool calls -----------------------------------------------------------------------------


async def test_a_user_turn_with_tools_gets_one_tool_call_streamed_as_openai_does() -> None:
    pieces = await _pieces(_call(tools=TOOLS, tool_choice="required"))
    head, *arguments, finish, usage = pieces
    assert isinstance(head, Delta)
    (first,) = head.tool_calls or []
    assert first.index == 0
    assert first.type == "function"
    assert CALL_ID.fullmatch(first.id or "")
    assert first.function
    assert first.function.arguments == ""
    assert first.function.name in ("get_weather", "search", "ping")
    for piece in arguments:
        assert isinstance(piece, Delta)
        (more,) = piece.tool_calls or []
        assert (more.index, more.id, more.type) == (0, msgspec.UNSET, msgspec.UNSET)
        assert more.function
        assert more.function.name is msgspec.UNSET
        assert more.function.arguments
    assert finish == Delta(finish_reason="tool_calls")
    assert usage == Usage(prompt_tokens=11, completion_tokens=len(arguments) + 1)


@pytest.mark.parametrize(
    "prompt", ["What is the weather in Paris?", "find me a cat", "ping", "x" * 50, "¿qué?"]
)
async def test_the_arguments_are_json_fitting_the_chosen_tools_parameters(prompt: str) -> None:
    messages = [{"role": "user", "content": prompt}]
    pieces = await _pieces(_call(tools=TOOLS, tool_choice="required", messages=messages))
    (name,) = [c.function.name for c in _tool_call_pieces(pieces) if c.function and c.function.name]
    schemas: dict[str, dict[str, Any]] = {
        "get_weather": WEATHER,
        "search": SEARCH,
        "ping": {"type": "object"},
    }
    assert _fits(json.loads(_arguments(pieces)), schemas[name])


async def test_the_prompt_picks_among_the_tools() -> None:
    names = set()
    for i in range(20):
        messages = [{"role": "user", "content": f"question {i}"}]
        call = _call(tools=TOOLS, tool_choice="required", messages=messages)
        calls = _tool_call_pieces(await _pieces(call))
        names.add(calls[0].function.name if calls[0].function else None)
    assert names == {"get_weather", "search", "ping"}


async def test_the_same_request_gets_the_same_call_and_another_conversation_another_id() -> None:
    first = await _pieces(_call(tools=TOOLS, tool_choice="required"))
    assert first == await _pieces(_call(tools=TOOLS, tool_choice="required"))
    rome = [{"role": "user", "content": "Rome?"}]
    other = await _pieces(_call(tools=TOOLS, tool_choice="required", messages=rome))
    assert _tool_call_pieces(first)[0].id != _tool_call_pieces(other)[0].id


@pytest.mark.parametrize("name", ["get_weather", "search", "ping"])
async def test_a_named_tool_choice_is_the_tool_called(name: str) -> None:
    choice = {"type": "function", "function": {"name": name}}
    pieces = await _pieces(_call(tools=TOOLS, tool_choice=choice))
    head = _tool_call_pieces(pieces)[0]
    assert head.function
    assert head.function.name == name
    assert json.loads(_arguments(pieces)) is not None


async def test_a_tool_choice_naming_no_offered_tool_is_the_clients_error() -> None:
    choice = {"type": "function", "function": {"name": "launch"}}
    with pytest.raises(UpstreamError) as raised:
        await _reads(_call(tools=TOOLS, tool_choice=choice))
    assert raised.value.client_error


async def test_tool_choice_none_gets_the_plain_text() -> None:
    plain = await _pieces(_call())
    assert await _pieces(_call(tools=TOOLS, tool_choice="none")) == plain
    assert _text(plain)


async def test_the_turn_after_a_tools_result_is_text_that_tells_nothing_of_it() -> None:
    pieces = await _pieces(_call(tools=TOOLS, tool_choice="required", messages=TOOL_RESULT_TURN))
    text = _text(pieces)
    assert len(pieces) == 25
    assert "secret" not in text
    assert "21" not in text
    # the assistant's message with no content counts as an empty text, as the relay's does
    assert pieces[-1] == Usage(prompt_tokens=23, completion_tokens=24)


async def test_max_tokens_cuts_a_tool_call_short_and_says_so() -> None:
    pieces = await _pieces(_call(tools=TOOLS, tool_choice="required", max_tokens=3))
    assert len(_tool_call_pieces(pieces)) == 3
    assert pieces[-2:] == [Delta(finish_reason="length"), Usage(11, 3)]
    cut = _call(tools=TOOLS, tool_choice="required", max_tokens=1)
    (only_head,) = _tool_call_pieces(await _pieces(cut))
    assert only_head.id


# -- JSON response formats ------------------------------------------------------------------


async def test_json_object_replies_with_a_json_object_of_the_words() -> None:
    pieces = await _pieces(
        _call(messages=[{"role": "user", "content": "hi"}], response_format={"type": "json_object"})
    )
    reply = json.loads(_text(pieces))
    assert reply["answer"].startswith("quick brown fox jumps")
    assert pieces[-1] == Usage(4, len(pieces) - 1)


async def test_json_schema_replies_with_json_fitting_the_schema() -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "hits", "schema": SEARCH}}
    pieces = await _pieces(_call(response_format=response_format))
    assert _fits(json.loads(_text(pieces)), SEARCH)
    assert pieces == await _pieces(_call(response_format=response_format))


async def test_a_tool_call_wins_over_the_response_format() -> None:
    json_object = {"type": "json_object"}
    pieces = await _pieces(_call(tools=TOOLS, tool_choice="required", response_format=json_object))
    assert _tool_call_pieces(pieces)
    after_result = _call(messages=TOOL_RESULT_TURN, response_format={"type": "json_object"})
    assert "answer" in json.loads(_text(await _pieces(after_result)))


async def test_max_tokens_caps_json_replies() -> None:
    pieces = await _pieces(_call(max_tokens=4, response_format={"type": "json_object"}))
    assert pieces[:-2] == ['{"', "answer", '":', ' "']
    assert pieces[-2:] == [Delta(finish_reason="length"), Usage(11, 4)]
