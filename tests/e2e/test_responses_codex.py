"""Codex CLI's Responses requests, as it sends them by default (a ``namespace`` of function
tools, the hosted ``web_search``, ``store: false``, ``include``, ``reasoning``), through a
real server to a chat upstream (the mock, told to call the tool the user names): the
namespaced function is offered under a joined name, its call comes back as the client
defined it, and the hosted tool is left out and named in ``svc-omitted-tools``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from app.apis.responses.tools import OMITTED_TOOLS_HEADER
from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_upstreams import models_file

pytestmark = pytest.mark.e2e

_OBJECT = {"type": "object", "additionalProperties": False}
# The tools of a Codex CLI turn (codex-rs's ToolSpec, serialized): function tools, the
# multi-agent namespace and the hosted web search.
CODEX_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "shell",
        "description": "Runs a shell command and returns its output.",
        "strict": False,
        "parameters": {
            **_OBJECT,
            "properties": {
                "command": {"type": "array", "items": {"type": "string"}},
                "workdir": {"type": "string"},
                "timeout_ms": {"type": "number"},
            },
            "required": ["command"],
        },
    },
    {
        "type": "function",
        "name": "update_plan",
        "description": "Updates the task plan.",
        "strict": False,
        "parameters": {**_OBJECT, "properties": {"plan": {"type": "array"}}, "required": []},
    },
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Tools to start and coordinate sub-agents.",
        "tools": [
            {
                "type": "function",
                "name": "spawn_agent",
                "description": "Spawns an agent to work on a task.",
                "strict": False,
                "parameters": {
                    **_OBJECT,
                    "properties": {"message": {"type": "string"}, "agent_type": {"type": "string"}},
                    "required": ["message"],
                },
            },
            {
                "type": "function",
                "name": "wait_agent",
                "description": "Waits for agents to finish.",
                "strict": False,
                "parameters": {
                    **_OBJECT,
                    "properties": {"ids": {"type": "array", "items": {"type": "string"}}},
                    "required": ["ids"],
                },
            },
        ],
    },
    {"type": "web_search", "external_web_access": True},
]


def codex_body(model: str, text: str) -> dict[str, Any]:
    """A first turn's request, field for field as codex-rs's ResponsesApiRequest has it."""
    return {
        "model": model,
        "instructions": "You are Codex, a coding agent.",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "<permissions>workspace-write</>"}],
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
        ],
        "tools": CODEX_TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a0f0-7f3e-7c1a-9d2b-codex-session",
    }


@pytest.fixture(scope="module")
def mock() -> Iterator[MockProcess]:
    process = start_in_subprocess(chunks=8)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, mock: MockProcess) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("codex")
    path = models_file(tmp / "models.toml", mock.base_url, {"svc-code": ["mock-calltool"]})
    srv = start_server(
        tmp, extra_env={"SVC_MODELS_FILE": str(path), "MOCK_API_KEY": "mock-provider-key"}
    )
    yield srv
    stop_server(srv.process)


def _upstream_request(mock: MockProcess) -> dict[str, Any]:
    stats = httpx.get(mock.base_url.removesuffix("/v1") + "/_stats").json()
    return dict(stats["last_request"])


def test_codex_calls_a_namespaced_tool_through_a_chat_upstream(
    server: Server, mock: MockProcess
) -> None:
    pid = server.new_account(100_000)
    key = server.new_key(pid)
    client = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)
    body = codex_body("svc-code", "Use multi_agent_v1__spawn_agent to review the diff.")
    params = {k: v for k, v in body.items() if k != "stream"}
    with client.responses.stream(**params) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert events[-1].type == "response.completed"
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert (call.namespace, call.name) == ("multi_agent_v1", "spawn_agent")
    assert call.call_id.startswith("call_")
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done[0].name == "spawn_agent"  # type: ignore[union-attr]

    # what the chat upstream was offered: the functions, the namespace's under joined
    # names, and no hosted tool
    sent = _upstream_request(mock)
    assert [t["function"]["name"] for t in sent["tools"]] == [
        "shell",
        "update_plan",
        "multi_agent_v1__spawn_agent",
        "multi_agent_v1__wait_agent",
    ]
    assert sent["tool_choice"] == "auto"

    # the next turn sends the call back (with its namespace) and its output
    second = {
        **body,
        "input": [
            *body["input"],
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id, "output": "agent_1"},
        ],
    }
    with httpx.stream(
        "POST",
        f"{server.base_url}/responses",
        json=second,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        assert response.headers[OMITTED_TOOLS_HEADER] == "web_search"
        wire = response.read().decode()
    assert '"type":"response.completed"' in wire
    history = _upstream_request(mock)["messages"]
    assert history[-2]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"
    assert history[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": "agent_1"}


def test_a_tool_choice_naming_the_hosted_tool_is_still_refused(server: Server) -> None:
    pid = server.new_account(100_000)
    body = {**codex_body("svc-code", "Search the web."), "tool_choice": {"type": "web_search"}}
    response = httpx.post(
        f"{server.base_url}/responses",
        json=body,
        headers={"authorization": f"Bearer {server.new_key(pid)}"},
        timeout=30,
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_value", "tool_choice.type")
    assert json.dumps(error).count("web_search") >= 1
