"""Every OpenAI client feature through a real granian server with the official Python SDK:
tools and tool results, vision, JSON mode, usage, and the 400s of malformed requests. The
upstream is svc's simulated one, which speaks tools (deterministic per request)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Oslo? Use get_weather."}]
IMAGE = (
    "data:image/png;base64,"
    + "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAfbLI3w"
    + "AAAABJRU5ErkJggg=="
)


def _client(server: Server, credits: int = 1_000_000) -> tuple[openai.OpenAI, str]:
    pid = server.new_account(credits)
    return openai.OpenAI(base_url=server.base_url, api_key=server.new_key(pid)), pid


def _tool_calls(chunks: list[Any]) -> dict[int, dict[str, str]]:
    """The tool calls of a stream, put together from their pieces as SDK users do."""
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            for piece in choice.delta.tool_calls or []:
                call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += piece.id or ""
                call["name"] += (piece.function and piece.function.name) or ""
                call["arguments"] += (piece.function and piece.function.arguments) or ""
    return calls


def _finishes(chunks: list[Any]) -> list[str | None]:
    return [choice.finish_reason for chunk in chunks for choice in chunk.choices]


def test_a_tool_call_round_trip(server: Server) -> None:
    client, pid = _client(server)
    before = server.balance(pid)
    chunks = list(
        client.chat.completions.create(
            model="svc-fast",
            messages=ASK,
            tools=[WEATHER],
            stream=True,  # type: ignore[list-item,arg-type]
        )
    )
    [call] = _tool_calls(chunks).values()
    assert call["name"] == "get_weather"
    arguments = json.loads(call["arguments"])
    assert isinstance(arguments["city"], str)
    assert arguments["unit"] in ("celsius", "fahrenheit")
    assert _finishes(chunks)[-1] == "tool_calls"
    assert all(f is None for f in _finishes(chunks)[:-1])
    assert {c.id for c in chunks} == {chunks[0].id}
    assert {c.model for c in chunks} == {"svc-fast"}
    meta = chunks[-1].model_extra["svc"]
    assert before - server.balance(pid) == meta["credits_used"] >= 1

    # the tool's result goes back; the model answers in text
    turn = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": '{"temperature": 3}'},
    ]
    answer = list(
        client.chat.completions.create(
            model="svc-fast",
            messages=turn,
            tools=[WEATHER],
            stream=True,  # type: ignore[arg-type,list-item]
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in answer if c.choices)
    assert text
    assert _finishes(answer)[-1] == "stop"
    assert not _tool_calls(answer)


def test_usage_for_clients_that_ask(server: Server) -> None:
    client, _ = _client(server)
    chunks = list(
        client.chat.completions.create(
            model="svc-code",
            messages=ASK,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.completion_tokens == len(
        [c for c in chunks if c.choices and c.choices[0].delta.content]
    )
    meta = chunks[-1].model_extra["svc"]
    price_in, price_out = 20, 60  # svc-code
    expected = -(-(usage.prompt_tokens * price_in + usage.completion_tokens * price_out) // 1000)
    assert meta["credits_used"] == expected


def test_usage_for_clients_that_do_not_ask(server: Server) -> None:
    """Without ``stream_options``, the last chunk still carries usage (as OpenRouter's do),
    in the shape it has when asked, and on that chunk alone: the SDK's own stream helper
    (``ChatCompletionStreamState``, which keeps the last usage it saw) reports it once."""
    client, _ = _client(server)
    plain = list(client.chat.completions.create(model="svc-code", messages=ASK, stream=True))  # type: ignore[arg-type]
    usage = plain[-1].usage
    assert usage is not None
    assert plain[-1].choices == []
    assert [c for c in plain if c.usage is not None] == [plain[-1]]
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.completion_tokens == len(
        [c for c in plain if c.choices and c.choices[0].delta.content]
    )
    meta = plain[-1].model_extra["svc"]  # type: ignore[index]
    price_in, price_out = 20, 60  # svc-code
    expected = -(-(usage.prompt_tokens * price_in + usage.completion_tokens * price_out) // 1000)
    assert meta["credits_used"] == expected
    with client.chat.completions.stream(model="svc-code", messages=ASK) as stream:  # type: ignore[arg-type]
        final = stream.get_final_completion()
    assert final.usage is not None
    assert final.usage.completion_tokens == usage.completion_tokens
    assert final.usage.total_tokens == final.usage.prompt_tokens + final.usage.completion_tokens


def test_async_client_calls_a_tool(server: Server) -> None:
    pid = server.new_account(100_000)

    async def run() -> dict[int, dict[str, str]]:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key=server.new_key(pid))
        stream = await client.chat.completions.create(
            model="svc-smart",
            messages=ASK,  # type: ignore[arg-type]
            tools=[WEATHER],  # type: ignore[list-item]
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            parallel_tool_calls=False,
            stream=True,
        )
        chunks = [chunk async for chunk in stream]
        assert _finishes(chunks)[-1] == "tool_calls"
        return _tool_calls(chunks)

    [call] = asyncio.run(run()).values()
    assert call["name"] == "get_weather"


def test_vision_and_json_mode(server: Server) -> None:
    client, pid = _client(server)
    before = server.balance(pid)
    parts = [
        {"type": "text", "text": "What is in this picture? Answer in JSON."},
        {"type": "image_url", "image_url": {"url": IMAGE, "detail": "low"}},
    ]
    chunks = list(
        client.chat.completions.create(
            model="svc-fast",
            messages=[{"role": "user", "content": parts}],  # type: ignore[list-item]
            response_format={"type": "json_object"},
            seed=1,
            stop=["\n\n"],
            presence_penalty=0.1,
            user="u-1",
            stream=True,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert isinstance(json.loads(text), dict)
    assert before - server.balance(pid) == chunks[-1].model_extra["svc"]["credits_used"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 2}, "n"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        (
            {"tools": [{"type": "function", "function": {"description": "no name"}}]},
            "tools[0].function",
        ),
        (
            {"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": [WEATHER]},
            "tool_choice",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "video", "url": "x"}]}]},
            "messages[0].content[0]",
        ),
        ({"temperature": 3}, "temperature"),
    ],
)
def test_malformed_requests_are_400s_that_name_the_field(
    server: Server, extra: dict[str, object], param: str
) -> None:
    pid = server.new_account(1_000)
    key = server.new_key(pid)
    body = {"model": "svc-fast", "messages": ASK, **extra}
    r = httpx.post(
        f"{server.base_url}/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_value")
    assert error["param"] is not None
    assert error["param"].startswith(param)
    assert server.balance(pid) == 1_000  # nothing reserved, nothing charged


def test_money_holds_for_tool_and_vision_requests_under_concurrency(server: Server) -> None:
    pid = server.new_account(1_000_000)
    key = server.new_key(pid)
    start = server.balance(pid)
    vision = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": IMAGE}},
            ],
        }
    ]

    async def one(client: httpx.AsyncClient, n: int) -> int:
        body: dict[str, object] = {"model": "svc-fast", "stream": True}
        body["messages"] = vision if n % 2 else ASK
        if not n % 2:
            body["tools"] = [WEATHER]
        r = await client.post("/chat/completions", json=body)
        assert r.status_code == 200, r.text
        events = [e for e in r.text.split("\n\n") if e]
        assert events[-1] == "data: [DONE]"
        return int(json.loads(events[-2][6:])["svc"]["credits_used"])

    async def run() -> list[int]:
        auth = {"authorization": f"Bearer {key}"}
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(
            base_url=server.base_url, headers=auth, timeout=60, limits=limits
        ) as client:
            return list(await asyncio.gather(*(one(client, n) for n in range(100))))

    used = asyncio.run(run())
    usage = httpx.get(
        f"{server.base_url}/usage", headers={"authorization": f"Bearer {key}"}, timeout=30
    ).json()
    assert start - server.balance(pid) == sum(used) == usage["credits_spent"]
    assert usage["requests_count"] == 100
    reservations = server.metrics()[("svc_open_reservations", ())]
    assert reservations == 0
