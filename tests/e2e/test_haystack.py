"""Haystack (``OpenAIChatGenerator``, and an ``Agent`` with one ``Tool``) against a real
``svc serve`` with the simulated upstream: a streamed chat with the usage Haystack reads, an
agent that calls its tool and answers, what a call without ``streaming_callback`` (not
streamed) gets, and how many requests a 402, a daily-cap 429, a 401 and a 502 cost.

Every body Haystack sent is recorded (its ``http_client_kwargs``' event hooks) and sent
again with the official Python SDK: the simulated upstream answers the same body with the
same text, so the charge is checked exactly. Haystack sends telemetry to PostHog unless
``HAYSTACK_TELEMETRY_ENABLED`` is false; set here before it is imported, so the tests stay
offline.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"

import httpx
import openai
import pytest
from haystack.components.agents import Agent
from haystack.components.generators.chat import (
    OpenAIChatGenerator,
)
from haystack.dataclasses import ChatMessage, StreamingChunk
from haystack.tools import Tool
from haystack.utils import Secret

from tests.e2e.conftest import Server
from tests.e2e.test_client_recipes import (  # the shared keys and the down server
    HELLO,
    MODEL,
    Keys,
    down,  # noqa: F401
    keys,  # noqa: F401
    requests_answered,
)

pytestmark = pytest.mark.e2e

FUNDS = 100_000
# the simulated upstream calls a tool offered under tool_choice "auto" (Haystack sends none,
# OpenAI's default) when the last user message names it
TASK = "What is the weather in Paris? Use get_weather."


def get_weather(city: str) -> str:
    return f"sunny in {city}"


WEATHER = Tool(
    name="get_weather",
    description="The weather in a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string", "description": "the city's name"}},
        "required": ["city"],
    },
    function=get_weather,
)


class Recorder:
    """The streaming callback Haystack calls for every chunk, and the bodies it sent."""

    def __init__(self) -> None:
        self.chunks: list[StreamingChunk] = []
        self.sent: list[dict[str, Any]] = []

    def __call__(self, chunk: StreamingChunk) -> None:
        self.chunks.append(chunk)

    def record(self, request: httpx.Request) -> None:
        self.sent.append(json.loads(request.content))


def generator(server: Server, key: str, recorder: Recorder, **settings: Any) -> Any:
    return OpenAIChatGenerator(
        api_key=Secret.from_token(key),
        model=MODEL,
        api_base_url=server.base_url,
        http_client_kwargs={"event_hooks": {"request": [recorder.record]}},
        **settings,
    )


def charged_for(server: Server, body: dict[str, Any]) -> tuple[str, dict[str, int], int]:
    """The text, usage and credits the official Python SDK gets for the same body."""
    request = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    client = openai.OpenAI(
        base_url=server.base_url, api_key=server.new_key(server.new_account(FUNDS))
    )
    text, usage, svc = "", None, None
    with client:
        for chunk in client.chat.completions.create(**request, stream=True):
            text += "".join(choice.delta.content or "" for choice in chunk.choices)
            usage = chunk.usage or usage
            svc = (chunk.model_extra or {}).get("svc", svc)
    assert usage is not None
    assert svc is not None
    tokens = {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
    return text, tokens, int(svc["credits_used"])


def test_haystack_streams_text_and_reads_its_usage(server: Server) -> None:
    pid = server.new_account(FUNDS)
    recorder = Recorder()
    llm = generator(server, server.new_key(pid), recorder, streaming_callback=recorder)
    [reply] = llm.run([ChatMessage.from_user(HELLO)])["replies"]
    [body] = recorder.sent
    assert body["stream"] is True
    assert "stream_options" not in body  # Haystack does not ask for usage; svc sends it anyway
    text, usage, credits = charged_for(server, body)
    assert len(recorder.chunks) > 1
    assert "".join(chunk.content for chunk in recorder.chunks) == reply.text == text
    assert reply.meta["finish_reason"] == "stop"
    assert {k: reply.meta["usage"][k] for k in usage} == usage
    assert FUNDS - server.balance(pid) == credits


def test_a_haystack_agent_calls_its_tool_and_answers(server: Server) -> None:
    pid = server.new_account(FUNDS)
    recorder = Recorder()
    agent = Agent(
        chat_generator=generator(server, server.new_key(pid), recorder),
        tools=[WEATHER],
        streaming_callback=recorder,
        max_agent_steps=3,
    )
    result = agent.run([ChatMessage.from_user(TASK)])
    messages = result["messages"]
    [call] = messages[1].tool_calls
    assert call.tool_name == "get_weather"
    [tool_result] = messages[2].tool_call_results
    assert tool_result.result == get_weather(call.arguments["city"])
    assert result["last_message"].text
    assert result["exit_reason"] == "text"
    first, second = recorder.sent
    assert first["stream"] is second["stream"] is True
    assert [tool["function"]["name"] for tool in first["tools"]] == ["get_weather"]
    assert "tool_choice" not in first
    assert second["messages"][-1]["role"] == "tool"
    charges = [charged_for(server, body) for body in recorder.sent]
    assert result["last_message"].text == charges[1][0]
    assert {k: result["token_usage"][k] for k in charges[0][1]} == {
        k: charges[0][1][k] + charges[1][1][k] for k in charges[0][1]
    }
    assert FUNDS - server.balance(pid) == charges[0][2] + charges[1][2]


def test_haystack_without_streaming_callback_is_charged_and_unreadable(server: Server) -> None:
    pid = server.new_account(FUNDS)
    recorder = Recorder()
    llm = generator(server, server.new_key(pid), recorder)
    with pytest.raises(AssertionError, match="Unexpected response type for non-streaming"):
        llm.run([ChatMessage.from_user(HELLO)])
    [body] = recorder.sent  # not retried
    assert body["stream"] is False
    assert FUNDS - server.balance(pid) == charged_for(server, body)[2]


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The OpenAI SDK's waits between retries, taken instead of slept."""
    taken: list[float] = []
    monkeypatch.setattr("openai._base_client.time.sleep", taken.append)
    return taken


@pytest.mark.parametrize(
    ("answer", "status", "error", "attempts"),
    [
        ("poor", 402, openai.APIStatusError, 1),
        ("capped", 429, openai.RateLimitError, 1),
        ("unknown", 401, openai.AuthenticationError, 1),
        ("down", 502, openai.InternalServerError, 6),  # max_retries: Haystack's default, 5
    ],
)
def test_haystack_on_402_429_401_and_502(
    server: Server,
    down: Server,  # noqa: F811
    keys: Keys,  # noqa: F811
    waits: list[float],
    answer: str,
    status: int,
    error: type[Exception],
    attempts: int,
) -> None:
    srv = down if answer == "down" else server
    key = "sk-svc-not-a-key" if answer == "unknown" else getattr(keys, answer)
    recorder = Recorder()
    llm = generator(srv, key, recorder, streaming_callback=recorder)
    before = requests_answered(srv, status)
    started = time.monotonic()
    with pytest.raises(error):
        llm.run([ChatMessage.from_user(HELLO)])
    assert time.monotonic() - started < 5
    assert requests_answered(srv, status) - before == len(recorder.sent) == attempts
    assert len(waits) == attempts - 1
    # the OpenAI SDK's backoff: 0.5 s doubled up to 8 s, less up to a quarter of jitter
    for retry, wait in enumerate(waits):
        assert 0.75 * min(0.5 * 2**retry, 8) <= wait <= min(0.5 * 2**retry, 8)


def test_haystack_max_retries_zero_sends_a_502_once(
    down: Server,  # noqa: F811
    keys: Keys,  # noqa: F811
    waits: list[float],
) -> None:
    recorder = Recorder()
    llm = generator(down, keys.down, recorder, streaming_callback=recorder, max_retries=0)
    with pytest.raises(openai.InternalServerError):
        llm.run([ChatMessage.from_user(HELLO)])
    assert len(recorder.sent) == 1
    assert waits == []
