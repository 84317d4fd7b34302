"""The AutoGen recipes of docs/clients.md, run as written there against a real svc server
(tests/e2e/test_client_recipes_isolated.py drives them; common.py: how to run one by hand):

    SVC_API_KEY=... .venv/clients/bin/python autogen_recipes.py \
        BASE_URL MODEL RECIPE [NAME=VALUE ...]

RECIPE, on ``OpenAIChatCompletionClient(model=..., base_url=..., api_key=..., model_info=...)``
(autogen-ext's OpenAI client; svc's model names are not OpenAI's, so ``model_info`` says
what the model can do):
  stream  create_stream: the text as it streams, then the CreateResult with its usage
  create  create, which does not stream: what AutoGen makes of svc's stream
  agent   an AssistantAgent (model_client_stream=True) with one tool, get_weather, asked a
          task that names it: the messages of its run, each with its models_usage

Settings (NAME=VALUE): max_retries = the OpenAI client's (its default is 2); reflect = 1 for
reflect_on_tool_use=True (the agent asks the model again with the tool's result).

Every line also reports ``elapsed``, the seconds the recipe took.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import CreateResult, ModelInfo, UserMessage
from autogen_ext.models.openai import OpenAIChatCompletionClient
from common import Job, main

HELLO = "Say hello in five words."
TASK = "What is the weather in Paris? Use get_weather."
MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=True,
    structured_output=True,
    family="unknown",
)


async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def client(job: Job) -> OpenAIChatCompletionClient:
    max_retries = job.setting("max_retries")
    return OpenAIChatCompletionClient(
        model=job.model,
        base_url=job.base_url,
        api_key=job.api_key,
        model_info=MODEL_INFO,
        http_client=job.async_http_client(),
        **({"max_retries": int(max_retries)} if max_retries else {}),
    )


def usage(result: Any) -> dict[str, int] | None:
    if result is None:
        return None
    return {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens}


async def recipe(job: Job, seen: dict[str, Any]) -> None:
    model = client(job)
    try:
        if job.recipe == "stream":
            deltas: list[str] = []
            async for item in model.create_stream([UserMessage(content=HELLO, source="user")]):
                if isinstance(item, CreateResult):
                    seen["text"] = item.content
                    seen["finish_reason"] = item.finish_reason
                    seen["usage"] = usage(item.usage)
                else:
                    deltas.append(item)
            seen["deltas"] = deltas
        elif job.recipe == "create":
            result = await model.create([UserMessage(content=HELLO, source="user")])
            seen["text"] = result.content
        elif job.recipe == "agent":
            agent = AssistantAgent(
                name="assistant",
                model_client=model,
                tools=[get_weather],
                model_client_stream=True,
                reflect_on_tool_use=job.setting("reflect") == "1",
            )
            run = await agent.run(task=TASK)
            seen["messages"] = [
                {
                    "type": message.type,
                    "text": message.to_text(),
                    "usage": usage(message.models_usage),
                }
                for message in run.messages
            ]
            seen["stop_reason"] = run.stop_reason
        else:
            raise ValueError(f"no recipe {job.recipe!r}")
        seen["total_usage"] = usage(model.total_usage())
    finally:
        await model.close()


def run(job: Job, seen: dict[str, Any]) -> None:
    started = time.monotonic()
    try:
        asyncio.run(recipe(job, seen))
    finally:
        seen["elapsed"] = time.monotonic() - started


if __name__ == "__main__":
    main(
        "autogen_recipes.py",
        run,
        {
            "text": None,
            "deltas": None,
            "finish_reason": None,
            "usage": None,
            "messages": None,
            "stop_reason": None,
            "total_usage": None,
            "elapsed": None,
            "error": None,
        },
    )
