"""The LlamaIndex recipes of docs/clients.md (``OpenAILike``), run as written there against a
real svc server (tests/e2e/test_client_recipes_isolated.py drives them; common.py: how to run
one by hand):

    SVC_API_KEY=... .venv/clients/bin/python llamaindex_recipes.py \
        BASE_URL MODEL RECIPE [NAME=VALUE ...]

RECIPE, on ``OpenAILike(model=..., api_base=..., api_key=..., is_chat_model=True,
is_function_calling_model=True, context_window=..., additional_kwargs={"stream_options":
{"include_usage": True}})``:
  stream-chat      stream_chat: the text, the usage and svc's metadata of the last response
  astream-chat     the same with astream_chat
  stream-complete  the same with stream_complete (a chat completion: is_chat_model=True)
  structured       stream_structured_predict of the nested model common.Person (a tool call,
                   the model being function-calling): the object as it grows, the last validated
  chat             chat(), which does not stream: what LlamaIndex makes of svc's stream
  complete         complete(), the same
  chat-retry       chat() on a clock of its own (time.sleep only moves time.monotonic on): how
                   many requests and which waits, LlamaIndex's retries around the OpenAI client's

Settings (NAME=VALUE): plain=1 leaves additional_kwargs out (no usage asked for);
chat_model=0 leaves is_chat_model at its default, False (the legacy completions endpoint);
max_retries = OpenAILike's (default 3), which it also gives its OpenAI client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from common import Job, Person, main
from llama_index.core.llms import ChatMessage
from llama_index.core.prompts import PromptTemplate
from llama_index.llms.openai_like import OpenAILike

CONTEXT_WINDOW = 128_000
USAGE = {"stream_options": {"include_usage": True}}
HELLO = "Say hello in five words."


@contextmanager
def fake_clock(waited: list[float]) -> Iterator[None]:
    """time.sleep moves time.monotonic on instead of sleeping, and records each wait: tenacity
    (LlamaIndex's retries) and the OpenAI SDK read both from the time module at each call."""
    sleep, monotonic = time.sleep, time.monotonic
    now = [monotonic()]

    def advance(seconds: float) -> None:
        waited.append(round(seconds, 2))
        now[0] += seconds

    time.sleep, time.monotonic = advance, lambda: now[0]
    try:
        yield
    finally:
        time.sleep, time.monotonic = sleep, monotonic


def llm(job: Job) -> OpenAILike:
    max_retries = job.setting("max_retries")
    return OpenAILike(
        model=job.model,
        api_base=job.base_url,
        api_key=job.api_key,
        is_chat_model=job.setting("chat_model") != "0",
        is_function_calling_model=True,
        context_window=CONTEXT_WINDOW,
        additional_kwargs={} if job.setting("plain") == "1" else USAGE,
        http_client=job.http_client(),
        async_http_client=job.async_http_client(),
        **({"max_retries": int(max_retries)} if max_retries else {}),
    )


def read(seen: dict[str, Any], response: Any) -> None:
    seen["text"] += response.delta or ""
    seen["deltas"] += 1
    # the last response: the usage LlamaIndex read, and svc's metadata on the raw chunk
    seen["usage"] = response.additional_kwargs or None
    seen["svc"] = (getattr(response.raw, "model_extra", None) or {}).get("svc")


async def astream(job: Job, seen: dict[str, Any]) -> None:
    async for response in await llm(job).astream_chat([ChatMessage(role="user", content=HELLO)]):
        read(seen, response)


def run(job: Job, seen: dict[str, Any]) -> None:
    messages = [ChatMessage(role="user", content=HELLO)]
    if job.recipe == "stream-chat":
        for response in llm(job).stream_chat(messages):
            read(seen, response)
    elif job.recipe == "astream-chat":
        asyncio.run(astream(job, seen))
    elif job.recipe == "stream-complete":
        for response in llm(job).stream_complete(HELLO):
            read(seen, response)
    elif job.recipe == "structured":
        prompt = PromptTemplate("Describe {who}.")
        seen["objects"] = list(llm(job).stream_structured_predict(Person, prompt, who="a person"))
    elif job.recipe == "chat":
        seen["text"] = llm(job).chat(messages).message.content
    elif job.recipe == "complete":
        seen["text"] = llm(job).complete(HELLO).text
    elif job.recipe == "chat-retry":
        with fake_clock(seen["waited"]):
            seen["text"] = llm(job).chat(messages).message.content
    else:
        raise SystemExit(f"no recipe {job.recipe!r}")


if __name__ == "__main__":
    empty = {"text": "", "deltas": 0, "usage": None, "svc": None, "objects": [], "waited": []}
    main("llamaindex_recipes.py", run, {**empty, "error": None})
