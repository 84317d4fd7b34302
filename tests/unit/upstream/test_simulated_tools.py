"""When the simulated upstream calls a tool (``app.upstream.simulated_tools``, issue 46
item 6): under ``"auto"`` only when the user's message names one (an agent on ``make run``
must not run a tool for "Say hello."), always under ``"required"`` or a named choice; and
the sampled arguments keep the schema's types: integers are ints within their bounds,
numbers, booleans and enum members as declared, required fields there."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from app.upstream.base import Piece, UpstreamCall
from app.upstream.simulated import SimulatedProvider
from app.upstream.wire import ChatRequest, Delta

# opencode's (zod's) way of writing a tool: integers with bounds, optional fields
READ: dict[str, Any] = {
    "type": "object",
    "properties": {
        "filePath": {"type": "string"},
        "offset": {"type": "integer", "minimum": 0, "maximum": 9007199254740991},
        "limit": {"type": "integer", "exclusiveMinimum": 0, "maximum": 2000},
    },
    "required": ["filePath"],
    "additionalProperties": False,
}
FORECAST: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 3, "maximum": 5},
        "hours": {"type": ["integer", "null"], "minimum": 20},
        "scale": {"type": "number", "minimum": 0.5, "maximum": 0.75},
        "detailed": {"type": "boolean"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "step": {"type": "integer", "multipleOf": 15, "minimum": 16},
    },
    "required": ["city", "days", "hours", "scale", "detailed", "unit", "step"],
}
TOOLS = [
    {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "read", "parameters": READ}},
    {"type": "function", "function": {"name": "get_forecast", "parameters": FORECAST}},
    {"type": "function", "function": {"name": "write"}},
]


def _reply(text: str, **request: Any) -> list[Piece]:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "tools": TOOLS}
    call = UpstreamCall(
        model="simulated",
        request=msgspec.convert({**body, **request}, ChatRequest),
        max_tokens=10_000,
    )
    return SimulatedProvider().reply(call)


def _called(pieces: list[Piece]) -> tuple[str, dict[str, Any]] | None:
    """The tool called and its arguments; None for a text reply."""
    calls = [c for p in pieces if isinstance(p, Delta) for c in p.tool_calls or []]
    if not calls:
        assert any(isinstance(p, str) for p in pieces)
        return None
    name = calls[0].function.name if calls[0].function else None
    arguments = "".join(c.function.arguments or "" for c in calls if c.function)
    assert isinstance(name, str)
    return name, json.loads(arguments)


@pytest.mark.parametrize("choice", [{}, {"tool_choice": "auto"}])
@pytest.mark.parametrize(
    "text",
    [
        "Say hello.",
        "What is the weather in Oslo?",
        "Tell me about bashful cats.",  # "bash" inside a word names nothing
        "The readme, please.",
        "My get_forecasting job",
    ],
)
def test_auto_answers_text_when_the_message_names_no_tool(
    text: str, choice: dict[str, Any]
) -> None:
    assert _called(_reply(text, **choice)) is None


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Run bash: ls", "bash"),
        ("Use get_forecast for Oslo.", "get_forecast"),
        ("READ the file, then bash it", "read"),  # in any case; the one named first
        ("(write)", "write"),
    ],
)
def test_auto_calls_the_tool_the_message_names(text: str, name: str) -> None:
    called = _called(_reply(text, tool_choice="auto"))
    assert called is not None
    assert called[0] == name


def test_only_the_last_user_message_counts() -> None:
    messages = [
        {"role": "user", "content": "Run bash."},
        {"role": "assistant", "content": "Which command?"},
        {"role": "user", "content": "Never mind, say hello."},
    ]
    assert _called(_reply("", messages=messages)) is None


@pytest.mark.parametrize("text", ["Say hello.", "question 7", "¿qué?"])
def test_required_always_calls_a_tool(text: str) -> None:
    called = _called(_reply(text, tool_choice="required"))
    assert called is not None
    assert called[0] in {"bash", "read", "get_forecast", "write"}


def test_a_named_choice_is_called_whatever_the_message_says() -> None:
    choice = {"type": "function", "function": {"name": "read"}}
    called = _called(_reply("Say hello.", tool_choice=choice))
    assert called is not None
    assert called[0] == "read"


def test_none_answers_text_even_when_the_message_names_a_tool() -> None:
    assert _called(_reply("Run bash.", tool_choice="none")) is None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@pytest.mark.parametrize("seed", range(12))
def test_sampled_arguments_keep_the_schemas_types(seed: int) -> None:
    choice = {"type": "function", "function": {"name": "get_forecast"}}
    called = _called(_reply(f"forecast {seed}", tool_choice=choice))
    assert called is not None
    arguments = called[1]
    assert set(FORECAST["required"]) <= set(arguments)
    assert _is_int(arguments["days"])
    assert 3 <= arguments["days"] <= 5
    assert _is_int(arguments["hours"])
    assert arguments["hours"] >= 20
    assert isinstance(arguments["scale"], float)
    assert 0.5 <= arguments["scale"] <= 0.75
    assert isinstance(arguments["detailed"], bool)
    assert arguments["unit"] in ("celsius", "fahrenheit")
    assert _is_int(arguments["step"])
    assert arguments["step"] % 15 == 0
    assert arguments["step"] >= 16
    assert isinstance(arguments["city"], str)


@pytest.mark.parametrize("seed", range(12))
def test_a_zod_tools_integers_are_ints_in_their_bounds(seed: int) -> None:
    called = _called(_reply(f"read file {seed}", tool_choice="auto"))
    assert called is not None
    name, arguments = called
    assert name == "read"
    assert isinstance(arguments["filePath"], str)
    assert _is_int(arguments["offset"])
    assert arguments["offset"] >= 0
    assert _is_int(arguments["limit"])
    assert 0 < arguments["limit"] <= 2000


def test_instructions_after_the_users_message_leave_it_the_users_turn() -> None:
    """Claude Code sends a system turn after the user's message."""
    messages = [
        {"role": "user", "content": "Run bash: ls"},
        {"role": "system", "content": "You may use get_forecast."},
    ]
    called = _called(_reply("", messages=messages))
    assert called is not None
    assert called[0] == "bash"
