"""The OpenAI Agents SDK against a real granian server, as its docs show it, with the one
change every svc user makes: the client's base URL and key. Its default model calls the
Responses API (``POST /v1/responses``)."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.models.openai_provider import OpenAIProvider
from openai import AsyncOpenAI

from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e


async def test_an_agent_calls_its_function_tool_and_answers(server: Server) -> None:
    pid = server.new_account(100_000)
    client = AsyncOpenAI(base_url=server.base_url, api_key=server.new_key(pid), max_retries=0)
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"Sunny in {city}, 21C"

    agent = Agent(
        name="weather", instructions="Answer with the tool.", model="svc-fast", tools=[get_weather]
    )
    config = RunConfig(model_provider=OpenAIProvider(openai_client=client), tracing_disabled=True)
    before = server.balance(pid)
    result = Runner.run_streamed(
        agent, input="What is the weather in Oslo? Use get_weather.", run_config=config
    )
    items: list[str] = []
    charged: list[dict[str, Any]] = []
    async for event in result.stream_events():
        if event.type == "run_item_stream_event":
            items.append(event.item.type)
        elif event.type == "raw_response_event" and event.data.type == "response.completed":
            charged.append(event.data.response.model_extra["svc"])  # type: ignore[index]
    assert len(asked) == 1  # the model called the tool, the SDK ran it
    assert items == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    assert isinstance(result.final_output, str)
    assert result.final_output
    # two responses (the call, then the answer), each paid as its svc object says
    assert len(charged) == len(result.raw_responses) == 2
    assert all(svc["requested_model"] == "svc-fast" for svc in charged)
    assert before - server.balance(pid) == sum(svc["credits_used"] for svc in charged)
    usage = result.context_wrapper.usage
    assert usage.requests == 2
    assert usage.output_tokens >= 2
