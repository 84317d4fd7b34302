"""The simulated upstream answers what structured-output clients ask, so they work on test
keys: a ``json_schema`` format or a tool's parameters with ``$defs`` (the OpenAI SDK's
parse helpers), and JSON asked for in the instructions, following the schema they show
(instructor's JSON modes, pydantic-ai's prompted output, LangChain's format instructions,
DSPy's JSON adapter)."""

from __future__ import annotations

import json
from typing import Any, Literal

import msgspec
import openai
import pytest
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, Field

from app.upstream.base import UpstreamCall
from app.upstream.simulated import SimulatedProvider
from app.upstream.wire import ChatRequest, Delta


class Address(BaseModel):
    city: str
    postcode: str | None = None


class User(BaseModel):
    name: str
    age: int = Field(ge=18, le=99)
    role: Literal["admin", "member"]
    addresses: list[Address] = Field(min_length=1)
    manager: User | None = None


SCHEMA = User.model_json_schema()
QUESTION = {"role": "user", "content": "Jason is 25 and lives in Paris."}


def _reply(messages: list[dict[str, Any]], **request: Any) -> str:
    """The reply's text (it must be whole: not cut at max_tokens, no tool call)."""
    body = {"model": "svc-fast", "messages": messages, **request}
    call = UpstreamCall(
        model="simulated", request=msgspec.convert(body, ChatRequest), max_tokens=10_000
    )
    *pieces, _usage = SimulatedProvider().reply(call)
    assert all(isinstance(piece, str) for piece in pieces)
    return "".join(piece for piece in pieces if isinstance(piece, str))


def _system(text: str) -> dict[str, str]:
    return {"role": "system", "content": text}


def _instructor_json_mode() -> str:
    schema = json.dumps(SCHEMA, indent=2)
    return (
        "\n        As a genius expert, your task is to understand the content and provide\n"
        "        the parsed objects in json that match the following json_schema:\n\n\n"
        f"        {schema}\n\n"
        "        Make sure to return an instance of the JSON, not the schema itself\n"
    )


def _pydantic_ai_prompted(schema: dict[str, Any]) -> str:
    return (
        "Always respond with a JSON object that's compatible with this schema:\n\n"
        f"{json.dumps(schema)}\n\n"
        "Don't include any text or Markdown fencing before or after.\n"
    )


# -- a schema the request gives ---------------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [SCHEMA, openai.pydantic_function_tool(User)["function"]["parameters"]],  # type: ignore[typeddict-item]
    ids=["pydantic", "strict"],
)
def test_a_json_schema_format_with_nested_models_gets_a_reply_the_model_reads(
    schema: dict[str, Any],
) -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "User", "schema": schema}}
    reply = _reply([QUESTION], response_format=response_format)
    user = User.model_validate_json(reply)
    managers = [user]
    while managers[-1].manager is not None:
        managers.append(managers[-1].manager)
    # the nested model filled in, not {}, and the recursion ended at the second visit to its
    # reference (strict schemas have the model once more at the top)
    assert len(managers) == (2 if "$ref" in schema else 3)
    assert _reply([QUESTION], response_format=response_format) == reply


@pytest.mark.parametrize(
    "tool",
    [openai.pydantic_function_tool(User), convert_to_openai_tool(User)],
    ids=["openai", "langchain"],  # LangChain inlines the $defs, the recursive one as {}
)
def test_a_tool_for_a_nested_model_gets_arguments_the_model_reads(tool: Any) -> None:
    body = {"model": "svc-fast", "messages": [QUESTION], "tools": [tool], "tool_choice": "required"}
    call = UpstreamCall(
        model="simulated", request=msgspec.convert(body, ChatRequest), max_tokens=10_000
    )
    pieces = SimulatedProvider().reply(call)
    arguments = "".join(
        tool_call.function.arguments or ""
        for piece in pieces
        if isinstance(piece, Delta)
        for tool_call in piece.tool_calls or []
        if tool_call.function
    )
    user = User.model_validate_json(arguments)
    assert user.addresses[0].city  # the nested model filled in, not {}


# -- JSON the instructions ask for ------------------------------------------------------


def test_instructor_json_mode_gets_an_instance_of_its_schema() -> None:
    reply = _reply(
        [_system(_instructor_json_mode()), QUESTION], response_format={"type": "json_object"}
    )
    User.model_validate_json(reply)


def test_instructor_md_json_mode_gets_json_without_a_response_format() -> None:
    ask = {
        "role": "user",
        "content": f"{QUESTION['content']}\n\nReturn the correct JSON response within a "
        "```json codeblock. not the JSON_SCHEMA",
    }
    User.model_validate_json(_reply([_system(_instructor_json_mode()), ask]))


def test_pydantic_ais_prompted_output_is_followed_on_the_turn_after_a_tool() -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    turns = [
        {"role": "developer", "content": _pydantic_ai_prompted(SCHEMA)},
        QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Paris"},
    ]
    User.model_validate_json(_reply(turns, tools=[tool]))


def test_langchains_format_instructions_are_followed_not_their_example() -> None:
    instructions = (
        "The output should be formatted as a JSON instance that conforms to the JSON schema "
        'below.\n\nAs an example, for the schema {"properties": {"foo": {"title": "Foo", '
        '"description": "a list of strings", "type": "array", "items": {"type": "string"}}}, '
        '"required": ["foo"]}\nthe object {"foo": ["bar", "baz"]} is a well-formatted instance '
        'of the schema. The object {"properties": {"foo": ["bar", "baz"]}} is not '
        f"well-formatted.\n\nHere is the output schema:\n```\n{json.dumps(SCHEMA)}\n```"
    )
    ask = {"role": "user", "content": f"{QUESTION['content']}\n{instructions}"}
    User.model_validate_json(_reply([ask]))


def test_dspys_json_adapter_gets_its_fields_in_their_types() -> None:
    # User is recursive: its schema is a $ref into its $defs
    users_schema = {"type": "array", "items": SCHEMA, "$defs": SCHEMA["$defs"]}
    note = "        # note: the value you produce "
    fields = {
        "reasoning": "{reasoning}",
        "answer": "{answer}" + note + "must be a single int value",
        "score": "{score}" + note + "must be a single float value",
        "done": "{done}" + note + "must be True or False",
        "mood": "{mood}" + note + "must exactly match (no extra characters) one of: joy; anger",
        "level": "{level}" + note + "must be one of: 1; 2",
        "users": "{users}" + note + "must adhere to the JSON schema: " + json.dumps(users_schema),
    }
    system = (
        "Your input fields are:\n1. `question` (str):\nYour output fields are: ...\n"
        "All interactions will be structured in the following way, with the appropriate "
        "values filled in.\n\nInputs will have the following structure:\n\n"
        "[[ ## question ## ]]\n{question}\n\n"
        "Outputs will be a JSON object with the following fields.\n\n"
        f"{json.dumps(fields, indent=2)}\n"
        "In adhering to this structure, your objective is: \n        Answer the question."
    )
    ask = {
        "role": "user",
        "content": "[[ ## question ## ]]\nWho is {Jason}?\n\nRespond with a JSON object in the "
        "following order of fields: `reasoning`, then `answer` (must be formatted as a "
        "valid Python int), then ...",
    }
    reply = json.loads(_reply([_system(system), ask], response_format={"type": "json_object"}))
    assert list(reply) == list(fields)
    assert isinstance(reply["reasoning"], str)
    assert type(reply["answer"]) is int
    assert isinstance(reply["score"], float)
    assert isinstance(reply["done"], bool)
    assert reply["mood"] in ("joy", "anger")
    assert reply["level"] in (1, 2)
    assert [User.model_validate(user) for user in reply["users"]]


@pytest.mark.parametrize(
    "ask",
    [
        "Respond in JSON.",
        "Reply with a JSON object, please.",
        "Give me valid json",
        'Summarise {"a": 1} as JSON only',  # an object that is no schema is no shape
    ],
)
def test_json_asked_for_with_no_schema_gets_a_small_object(ask: str) -> None:
    reply = json.loads(_reply([{"role": "user", "content": ask}]))
    assert list(reply) == ["answer"]
    assert isinstance(reply["answer"], str)


@pytest.mark.parametrize(
    "turns",
    [
        [{"role": "user", "content": "What is JSON?"}],
        [{"role": "user", "content": "I have a JSON file of 3 MB."}],
        [
            {"role": "user", "content": "Answer in JSON."},
            {"role": "assistant", "content": '{"answer": "ok"}'},
            {"role": "user", "content": "Now tell me in words."},
        ],
    ],
)
def test_json_only_mentioned_or_asked_for_earlier_gets_words(turns: list[dict[str, Any]]) -> None:
    reply = _reply(turns)
    assert not reply.startswith("{")
    assert len(reply.split()) == 24


def test_the_same_request_gets_the_same_json_and_another_prompt_other_values() -> None:
    system = _system(_pydantic_ai_prompted(SCHEMA))
    first = _reply([system, QUESTION])
    assert first == _reply([system, QUESTION])
    others = {_reply([system, {"role": "user", "content": f"question {i}"}]) for i in range(5)}
    assert len(others | {first}) > 1


@pytest.mark.parametrize(
    "noise",
    ["{" * 5000, '{"never": "closed' + "x" * 200_000, "[" * 100_000 + "{", '{"a": ' * 3000],
)
def test_a_prompt_full_of_braces_still_gets_an_object(noise: str) -> None:
    reply = json.loads(_reply([_system(f"Respond with a JSON object. {noise}"), QUESTION]))
    assert isinstance(reply, dict)
