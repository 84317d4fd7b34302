"""The OpenAI SDK's structured-output helpers against a real granian server on a test key
(always the simulated upstream): nested pydantic models, recursive ones included, come back
parsed from a ``json_schema`` response format, from a tool's arguments, and from the
Responses API's ``text.format``; a JSON mode with the schema in the instructions (as
instructor and pydantic-ai write it) gets JSON that fits it."""

from __future__ import annotations

import json
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field

from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e


class Step(BaseModel):
    action: Literal["move", "wait"]
    seconds: int = Field(ge=0, le=60)


class Task(BaseModel):
    title: str
    steps: list[Step] = Field(min_length=1)
    due: str | None
    subtask: Task | None


def _test_client(server: Server) -> openai.OpenAI:
    pid = server.new_account(100_000)
    key = server.new_key(pid, environment="test")
    return openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)


def test_chat_stream_parses_a_nested_model(server: Server) -> None:
    client = _test_client(server)
    with client.chat.completions.stream(
        model="svc-fast",
        messages=[{"role": "user", "content": "Plan my morning."}],
        response_format=Task,
    ) as stream:
        for _event in stream:
            pass
        completion = stream.get_final_completion()
    task = completion.choices[0].message.parsed
    assert isinstance(task, Task)
    assert task.steps
    assert isinstance(task.subtask, Task)


def test_chat_stream_parses_a_tools_arguments(server: Server) -> None:
    client = _test_client(server)
    with client.chat.completions.stream(
        model="svc-fast",
        messages=[{"role": "user", "content": "File a task with file_task."}],
        tools=[openai.pydantic_function_tool(Task, name="file_task")],
    ) as stream:
        for _event in stream:
            pass
        completion = stream.get_final_completion()
    (call,) = completion.choices[0].message.tool_calls or []
    assert call.function.name == "file_task"
    assert isinstance(call.function.parsed_arguments, Task)


def test_responses_stream_parses_a_nested_model(server: Server) -> None:
    client = _test_client(server)
    with client.responses.stream(
        model="svc-fast", input="Plan my morning.", text_format=Task
    ) as stream:
        for _event in stream:
            pass
        response = stream.get_final_response()
    assert isinstance(response.output_parsed, Task)


def test_json_mode_follows_the_schema_in_the_instructions(server: Server) -> None:
    client = _test_client(server)
    system = (
        "Always respond with a JSON object that's compatible with this schema:\n\n"
        f"{json.dumps(Task.model_json_schema())}\n\n"
        "Don't include any text or Markdown fencing before or after.\n"
    )
    stream = client.chat.completions.create(
        model="svc-fast",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Plan."}],
        response_format={"type": "json_object"},
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert isinstance(Task.model_validate_json(text), Task)
