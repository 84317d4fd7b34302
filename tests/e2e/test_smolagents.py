"""smolagents (``OpenAIServerModel``, ``ToolCallingAgent``) against a real ``svc serve`` with
the simulated upstream: a streamed chat with the usage smolagents reads, an agent that calls
one tool and answers, the non-streaming calls it makes (``generate``, and the final answer
it asks for when it runs out of steps), and how many requests a 402, a daily-cap 429, a 401
and a 502 cost, and how long they take.
"""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest
from smolagents import (  # type: ignore[import-untyped]
    ActionStep,
    OpenAIServerModel,
    ToolCallingAgent,
    tool,
)

from tests.e2e.conftest import Server
from tests.e2e.test_client_recipes import (  # the shared keys and the down server
    HELLO,
    MODEL,
    Keys,
    down,  # noqa: F401
    keys,  # noqa: F401
    reference,
    requests_answered,
)

pytestmark = pytest.mark.e2e

FUNDS = 100_000
# the simulated upstream picks the tool under tool_choice "required" (smolagents') by the
# prompt: this one gets get_weather first, then final_answer
TASK = "What is the weather in Paris? Use get_weather."


@tool
def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city's name
    """
    return f"sunny in {city}"


def model(server: Server, key: str, **settings: Any) -> Any:
    return OpenAIServerModel(model_id=MODEL, api_base=server.base_url, api_key=key, **settings)


def hello() -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": HELLO}]}]


def test_smolagents_streams_text_and_reads_its_usage(server: Server) -> None:
    pid = server.new_account(FUNDS)
    deltas = list(model(server, server.new_key(pid)).generate_stream(hello()))
    ref = reference(server, [{"role": "user", "content": HELLO}])
    assert "".join(delta.content or "" for delta in deltas) == ref.text
    [usage] = [delta.token_usage for delta in deltas if delta.token_usage]
    assert (usage.input_tokens, usage.output_tokens) == (ref.prompt_tokens, ref.completion_tokens)
    assert FUNDS - server.balance(pid) == ref.credits


def test_smolagents_generate_does_not_stream_and_is_charged(server: Server) -> None:
    pid = server.new_account(FUNDS)
    with pytest.raises(AttributeError, match="'str' object has no attribute 'choices'"):
        model(server, server.new_key(pid)).generate(hello())
    assert FUNDS - server.balance(pid) > 0  # served, charged, unreadable


def test_a_tool_calling_agent_calls_its_tool_and_answers(server: Server) -> None:
    pid = server.new_account(FUNDS)
    agent = ToolCallingAgent(
        tools=[get_weather],
        model=model(server, server.new_key(pid)),
        max_steps=3,
        stream_outputs=True,  # without it, every step is a non-streaming call
        verbosity_level=0,
    )
    answer = agent.run(TASK)
    steps = [step for step in agent.memory.steps if isinstance(step, ActionStep)]
    assert [[call.name for call in step.tool_calls or []] for step in steps] == [
        ["get_weather"],
        ["final_answer"],
    ]
    assert steps[0].observations.startswith("sunny in ")
    assert isinstance(answer, str)
    assert answer
    assert all(step.token_usage and step.token_usage.output_tokens > 0 for step in steps)
    assert FUNDS - server.balance(pid) > 0


def test_out_of_steps_its_final_answer_is_a_non_streaming_call(server: Server) -> None:
    """With max_steps spent, smolagents asks for a final answer with generate(), which does
    not stream: served and charged, and the answer is the error's text."""
    pid = server.new_account(FUNDS)
    agent = ToolCallingAgent(
        tools=[get_weather],
        model=model(server, server.new_key(pid)),
        max_steps=1,
        stream_outputs=True,
        verbosity_level=0,
    )
    before = requests_answered(server, 200)
    answer = agent.run(TASK)
    assert "'str' object has no attribute 'choices'" in str(answer)
    assert requests_answered(server, 200) - before == 2  # the step, then the final answer


@pytest.mark.parametrize(
    ("answer", "status", "error", "attempts"),
    [
        ("poor", 402, openai.APIStatusError, 1),
        ("capped", 429, openai.RateLimitError, 1),
        ("unknown", 401, openai.AuthenticationError, 1),
        ("down", 502, openai.InternalServerError, 3),
    ],
)
def test_smolagents_on_402_429_401_and_502(
    server: Server,
    down: Server,  # noqa: F811
    keys: Keys,  # noqa: F811
    answer: str,
    status: int,
    error: type[Exception],
    attempts: int,
) -> None:
    srv = down if answer == "down" else server
    key = "sk-svc-not-a-key" if answer == "unknown" else getattr(keys, answer)
    before = requests_answered(srv, status)
    started = time.monotonic()
    with pytest.raises(error):  # retry=False: smolagents' own retries off (below)
        list(model(srv, key, retry=False).generate_stream(hello()))
    assert requests_answered(srv, status) - before == attempts  # the OpenAI SDK's retries
    assert time.monotonic() - started < 5


def test_smolagents_sleeps_minutes_on_any_429_unless_retry_is_off(
    server: Server,
    keys: Keys,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its own retries (retry=True, the default) take every error whose text says 429 for a
    rate limit: 3 attempts, the first wait 2 to 4 minutes (60 s, doubled, jitter), the second
    2 to 4 times that. svc's daily cap sends no retry-after, but smolagents reads none."""
    waits: list[float] = []
    monkeypatch.setattr("smolagents.utils.time.sleep", waits.append)
    before = requests_answered(server, 429)
    with pytest.raises(openai.RateLimitError):
        list(model(server, keys.capped).generate_stream(hello()))
    assert requests_answered(server, 429) - before == 3
    first, second = waits
    assert 120 <= first <= 240
    assert 2 * first <= second <= 4 * first
