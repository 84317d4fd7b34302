"""Namespace tools offered to a chat upstream under names of their own and mapped back, and
hosted tools left out (``app.apis.responses.tools``): Codex CLI's requests, as it sends them."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from app.apis.responses.request import ResponsesParams, parse_responses_request
from app.apis.responses.stream import ResponsesStream
from app.apis.responses.tools import OMITTED_TOOLS_HEADER, chat_tools
from app.apis.responses.wire import ResponsesTool
from app.completion.catalog import default_catalog
from app.core.errors import ApiError
from app.upstream.responses_sse import ResponsesEvents
from app.upstream.wire import Delta, ToolCallDelta, ToolCallFunctionDelta
from tests.unit.apis.responses.test_responses_stream import _end, _events

ALIASES = default_catalog().aliases
SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Runs a shell command.",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "array", "items": {"type": "string"}}},
        "required": ["command"],
    },
}
SPAWN = {
    "type": "function",
    "name": "spawn_agent",
    "description": "Spawns an agent.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}},
}
WAIT = {**SPAWN, "name": "wait_agent", "description": "Waits for agents."}
MULTI_AGENT = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools to run sub-agents.",
    "tools": [SPAWN, WAIT],
}
WEB_SEARCH = {"type": "web_search", "external_web_access": True}


def _parse(**body: Any) -> ResponsesParams:
    request = {"model": "svc-fast", "input": "Hi", **body}
    return parse_responses_request(
        json.dumps(request).encode(),
        ALIASES,
        max_messages=100,
        max_message_chars=100_000,
        image_token_bound=100,
    )


def _tools(*tools: dict[str, Any]) -> list[ResponsesTool]:
    return msgspec.convert(list(tools), list[ResponsesTool])


def test_a_namespaces_functions_are_offered_under_joined_names() -> None:
    params = _parse(tools=[SHELL, MULTI_AGENT, WEB_SEARCH], tool_choice="auto")
    offered = params.chat.request.tools
    assert offered
    assert [t.function.name for t in offered] == [
        "shell",
        "multi_agent_v1__spawn_agent",
        "multi_agent_v1__wait_agent",
    ]
    spawn = offered[1].function
    assert spawn.parameters == SPAWN["parameters"]
    assert spawn.description == "Tools to run sub-agents.\n\nSpawns an agent."
    assert params.tools.names["multi_agent_v1__spawn_agent"] == ("multi_agent_v1", "spawn_agent")
    assert params.chat.request.tool_choice == "auto"
    # web_search is left out, and said so
    assert params.chat.headers == ((OMITTED_TOOLS_HEADER, "web_search"),)
    # the response echoes the tools served
    assert [t["type"] for t in params.settings.tools] == ["function", "namespace"]
    assert [t["name"] for t in params.settings.tools[1]["tools"]] == ["spawn_agent", "wait_agent"]


def test_hosted_tools_alone_are_left_out_with_their_tool_choice() -> None:
    params = _parse(
        tools=[WEB_SEARCH, {"type": "web_search_preview"}, {"type": "file_search"}, WEB_SEARCH],
        tool_choice="auto",
    )
    assert params.chat.request.tools is msgspec.UNSET
    assert params.chat.request.tool_choice is msgspec.UNSET
    assert params.chat.headers == (
        (OMITTED_TOOLS_HEADER, "web_search,web_search_preview,file_search"),
    )


def test_no_header_when_nothing_is_left_out() -> None:
    assert _parse(tools=[SHELL, MULTI_AGENT]).chat.headers == ()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [WEB_SEARCH], "tool_choice": {"type": "web_search"}}, "tool_choice.type"),
        ({"tools": [SHELL, WEB_SEARCH], "tool_choice": {"type": "web_search"}}, "tool_choice.type"),
        ({"tools": [{"type": "namespace", "tools": [SPAWN]}]}, "tools[0].name"),
        ({"tools": [{"type": "namespace", "name": "n", "tools": []}]}, "tools[0].tools"),
        (
            {"tools": [{"type": "namespace", "name": "n", "tools": [{"type": "custom"}]}]},
            "tools[0].tools[0].type",
        ),
        (
            {"tools": [{"type": "namespace", "name": "n", "tools": [SPAWN, SPAWN]}]},
            "tools[0].tools[1].name",
        ),
        (
            {"tools": [{"type": "namespace", "name": "n", "tools": [{**SPAWN, "name": "a b"}]}]},
            "tools[0].tools[0]",
        ),
    ],
)
def test_what_cannot_be_served_is_still_refused(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as info:
        _parse(**body)
    assert info.value.status == 400
    assert info.value.param == param


def test_a_name_that_collides_or_is_too_long_gets_a_digest_of_its_own() -> None:
    taken = {**SHELL, "name": "multi_agent_v1__spawn_agent"}
    long_namespace = "mcp__" + "x" * 70
    tools = chat_tools(
        _tools(
            taken,
            MULTI_AGENT,
            {"type": "namespace", "name": long_namespace, "tools": [SPAWN]},
            {"type": "namespace", "name": "crm.v2", "tools": [SPAWN]},
        )
    )
    names = [t.function.name for t in tools.tools]
    assert names[0] == "multi_agent_v1__spawn_agent"  # the client's own function keeps it
    assert names[2] == "multi_agent_v1__wait_agent"
    assert len(set(names)) == len(names)
    for name in (names[1], names[3], names[4]):
        assert 0 < len(name) <= 64
        assert name.replace("_", "").replace("-", "").isalnum()
    assert names[1].startswith("multi_agent_v1__spawn_agent_")
    assert names[4].startswith("crm_v2__spawn_agent_")
    assert tools.names[names[1]] == ("multi_agent_v1", "spawn_agent")
    assert tools.names[names[3]] == (long_namespace, "spawn_agent")
    assert tools.names[names[4]] == ("crm.v2", "spawn_agent")
    assert "multi_agent_v1__spawn_agent" not in tools.names  # it is the plain function's
    # deterministic: the same tools, the same names
    again = chat_tools(
        _tools(
            taken,
            MULTI_AGENT,
            {"type": "namespace", "name": long_namespace, "tools": [SPAWN]},
            {"type": "namespace", "name": "crm.v2", "tools": [SPAWN]},
        )
    )
    assert [t.function.name for t in again.tools] == names


def test_an_earlier_call_to_a_namespaced_function_goes_upstream_under_its_joined_name() -> None:
    call = {
        "type": "function_call",
        "call_id": "call_1",
        "name": "spawn_agent",
        "namespace": "multi_agent_v1",
        "arguments": '{"message": "go"}',
    }
    output = {"type": "function_call_output", "call_id": "call_1", "output": "spawned"}
    params = _parse(input=[{"role": "user", "content": "Hi"}, call, output], tools=[MULTI_AGENT])
    messages = params.chat.request.messages
    tool_calls = messages[1].tool_calls
    assert tool_calls
    assert tool_calls[0].function.name == "multi_agent_v1__spawn_agent"


def _call_items(stream: ResponsesStream, name: str) -> list[dict[str, Any]]:
    head = ToolCallDelta(0, id="x", type="function", function=ToolCallFunctionDelta(name, "{}"))
    raw = stream.opening() + stream.piece(Delta(tool_calls=[head]))
    raw += stream.closing(None, tool_calls=True) + stream.ending(_end())
    events = _events(raw)  # each checked against the openai SDK's event models
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert events[-1]["response"]["output"] == done
    return done


def _stream(params: ResponsesParams) -> ResponsesStream:
    return ResponsesStream(
        created_at=1,
        model="svc-fast",
        requested="svc-fast",
        settings=params.settings,
        names=params.tools.names,
    )


def test_an_upstream_call_is_written_as_the_client_defined_it() -> None:
    params = _parse(tools=[SHELL, MULTI_AGENT, WEB_SEARCH])
    (item,) = _call_items(_stream(params), "multi_agent_v1__spawn_agent")
    assert (item["name"], item["namespace"]) == ("spawn_agent", "multi_agent_v1")
    (plain,) = _call_items(_stream(params), "shell")
    assert plain["name"] == "shell"
    assert "namespace" not in plain


def test_a_responses_providers_namespaced_call_is_mapped_back_too() -> None:
    params = _parse(tools=[MULTI_AGENT])
    item = {
        "type": "function_call",
        "id": "fc_up",
        "call_id": "call_up",
        "name": "wait_agent",
        "namespace": "multi_agent_v1",
        "arguments": "",
    }
    added = {"type": "response.output_item.added", "item": item}
    pieces = ResponsesEvents().parse(b"data: " + json.dumps(added).encode())
    assert pieces
    delta = pieces[0]
    assert isinstance(delta, Delta)
    assert delta.tool_calls
    stream = _stream(params)
    raw = stream.opening() + stream.piece(delta)
    raw += stream.closing(None, tool_calls=True) + stream.ending(_end())
    done = [e["item"] for e in _events(raw) if e["type"] == "response.output_item.done"]
    assert (done[0]["name"], done[0]["namespace"]) == ("wait_agent", "multi_agent_v1")


def test_a_responses_provider_gets_the_tools_as_sent() -> None:
    native = msgspec.structs.replace(ALIASES["svc-fast"], native_responses=True)
    params = parse_responses_request(
        json.dumps(
            {"model": native.id, "input": "Hi", "tools": [SHELL, MULTI_AGENT, WEB_SEARCH]}
        ).encode(),
        {**ALIASES, native.id: native},
        max_messages=100,
        max_message_chars=100_000,
        image_token_bound=100,
    )
    assert params.chat.native is not None
    sent = json.loads(params.chat.native.body("m", 100))
    assert sent["tools"] == [SHELL, MULTI_AGENT, WEB_SEARCH]
    assert params.chat.headers == ()  # nothing left out
