"""The official openai SDK's Responses API against a real granian server: streaming text,
a function call round trip and structured output, metered as chat completions are."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time

import httpx
import openai
import pytest
from pydantic import BaseModel

from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def _client(server: Server, credits: int = 100_000) -> tuple[openai.OpenAI, str]:
    pid = server.new_account(credits)
    return openai.OpenAI(base_url=server.base_url, api_key=server.new_key(pid), max_retries=0), pid


def test_a_streamed_response_is_charged_what_its_svc_object_says(server: Server) -> None:
    client, pid = _client(server)
    before = server.balance(pid)
    events = list(
        client.responses.create(model="svc-fast", input="Say hello in five words.", stream=True)
    )
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    response = events[-1].response  # type: ignore[union-attr]
    assert text
    assert response.output_text == text
    assert response.id.startswith("resp_svc_")
    assert response.model == "svc-fast"
    assert response.usage is not None
    assert response.usage.output_tokens >= 1
    meta = response.model_extra["svc"]  # type: ignore[index]
    assert meta["requested_model"] == "svc-fast"
    after = server.balance(pid)
    assert before - after == meta["credits_used"] >= 1
    assert meta["balance_remaining"] == after


def test_the_stream_helper_gets_the_final_response(server: Server) -> None:
    client, _pid = _client(server)
    with client.responses.stream(
        model="svc-smart",
        instructions="Be brief.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Hello"}]}],
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.output_text == "".join(deltas)
    assert final.instructions == "Be brief."
    assert final.status == "completed"


def test_output_cut_at_max_output_tokens_is_an_incomplete_response(server: Server) -> None:
    # as OpenAI's: the stream ends with response.incomplete (the SDK's stream helper keeps
    # get_final_response for response.completed)
    client, _pid = _client(server)
    with client.responses.stream(model="svc-smart", input="Hello", max_output_tokens=16) as stream:
        events = list(stream)
    last = events[-1]
    assert last.type == "response.incomplete"
    response = last.response
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None
    assert response.usage.output_tokens == 16
    assert response.output_text == "".join(
        e.delta for e in events if e.type == "response.output_text.delta"
    )


def test_a_function_call_round_trip(server: Server) -> None:
    client, _pid = _client(server)
    question = {"role": "user", "content": "What is the weather in Paris? Use get_weather."}
    with client.responses.stream(model="svc-fast", input=[question], tools=[WEATHER]) as stream:
        for _event in stream:
            pass
        first = stream.get_final_response()
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather"
    assert set(json.loads(call.arguments)) == {"city"}
    assert call.call_id.startswith("call_")
    assert call.id is not None
    assert call.id.startswith("fc_")
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp": 21}'}
    with client.responses.stream(
        model="svc-fast",
        input=[question, call.model_dump(exclude_none=True), result],
        tools=[WEATHER],
    ) as stream:
        for _event in stream:
            pass
        second = stream.get_final_response()
    assert second.status == "completed"
    assert second.output_text
    assert not [item for item in second.output if item.type == "function_call"]


class City(BaseModel):
    name: str
    population: int


def test_structured_output_is_parsed(server: Server) -> None:
    client, _pid = _client(server)
    with client.responses.stream(
        model="svc-fast", input="Name a city.", text_format=City
    ) as stream:
        for _event in stream:
            pass
        final = stream.get_final_response()
    assert isinstance(final.output_parsed, City)


def test_a_non_stream_request_still_gets_a_stream(server: Server) -> None:
    client, _pid = _client(server)
    with client.responses.with_streaming_response.create(
        model="svc-fast", input="hi", stream=False
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        body = response.read().decode()
    assert "event: response.completed\n" in body


def test_what_svc_cannot_serve_is_a_400_that_takes_nothing(server: Server) -> None:
    client, pid = _client(server)
    before = server.balance(pid)
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model="svc-fast", input="hi", previous_response_id="resp_abc", stream=True
        )
    assert info.value.param == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model="svc-fast", input="hi", tools=[{"type": "local_shell"}], stream=True
        )
    assert info.value.param == "tools[0].type"
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model="gpt-4o", input="hi", stream=True)
    assert missing.value.code == "model_not_found"
    assert server.balance(pid) == before


def test_an_account_that_cannot_afford_it_gets_402(server: Server) -> None:
    client, pid = _client(server, credits=0)
    with pytest.raises(openai.APIStatusError) as info:
        client.responses.create(model="svc-smart", input="hi", stream=True)
    assert info.value.status_code == 402
    assert server.balance(pid) == 0


async def _responses(client: httpx.AsyncClient, url: str, key: str) -> tuple[int, int]:
    """(status, credits used) of one Responses request."""
    body = {"model": "svc-smart", "input": "hi", "max_output_tokens": 20}
    r = await client.post(url, json=body, headers={"authorization": f"Bearer {key}"})
    if r.status_code != 200:
        return r.status_code, 0
    last = [line for line in r.text.split("\n") if line.startswith("data: ")][-1]
    response = json.loads(last[6:])["response"]
    assert response["status"] == "incomplete"  # 24 simulated tokens cut at 20
    return 200, int(response["svc"]["credits_used"])


async def _chat(client: httpx.AsyncClient, url: str, key: str) -> tuple[int, int]:
    body = {"model": "svc-smart", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    r = await client.post(url, json=body, headers={"authorization": f"Bearer {key}"})
    if r.status_code != 200:
        return r.status_code, 0
    events = [e for e in r.text.split("\n\n") if e]
    return 200, int(json.loads(events[-2][6:])["svc"]["credits_used"])


async def test_responses_and_chat_traffic_share_one_balance_exactly(server: Server) -> None:
    # 100 of each at once against credits for far fewer: every charge is accounted for,
    # and the balance never goes below zero
    pid = server.new_account(4 * 60)
    key = server.new_key(pid)
    start = server.balance(pid)
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=200)) as client:
        results = await asyncio.gather(
            *(_responses(client, f"{server.base_url}/responses", key) for _ in range(100)),
            *(_chat(client, f"{server.base_url}/chat/completions", key) for _ in range(100)),
        )
    assert {status for status, _ in results} <= {200, 402}
    served = [used for status, used in results if status == 200]
    assert served
    assert all(used == 4 for used in served)
    end = server.balance(pid)
    assert end >= 0
    assert start - end == sum(served)
    assert any(status == 200 for status, _ in results[:100])
    # usage tells the two APIs apart, exactly: live from Redis, then durable once flushed
    by_api = {
        "responses": [used for status, used in results[:100] if status == 200],
        "chat": [used for status, used in results[100:] if status == 200],
    }
    expected = sorted((api, len(u), sum(u)) for api, u in by_api.items() if u)
    _usage_by_api_is(server, pid, key, expected)


def _usage_by_api_is(
    server: Server, pid: str, key: str, expected: list[tuple[str, int, int]]
) -> None:
    """``/v1/usage?group_by=api`` shows ``expected`` (api, requests, credits) today, and so
    does the durable store once the flusher caught up."""
    usage = httpx.get(
        f"{server.base_url}/usage?days=1&group_by=api",
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    ).json()
    today = usage["daily"][0]
    groups = [(g["api"], g["requests_count"], g["credits_spent"]) for g in today["groups"]]
    assert groups == expected
    assert today["credits_spent"] == usage["credits_spent"] == sum(c for _, _, c in expected)
    for _ in range(100):
        if not server.admin("GET", "/usage-lag").json()["pending_events"]:
            break
        time.sleep(0.1)
    conn = sqlite3.connect(server.data_dir / "svc.db")
    try:
        durable = conn.execute(
            "SELECT api, SUM(requests), SUM(credits) FROM usage_daily WHERE account_pid = ? "
            "GROUP BY api ORDER BY api",
            (pid,),
        ).fetchall()
    finally:
        conn.close()
    assert durable == expected


def test_usage_group_by_must_be_known(server: Server) -> None:
    key = server.new_key(server.new_account(10))
    r = httpx.get(
        f"{server.base_url}/usage?group_by=provider", headers={"authorization": f"Bearer {key}"}
    )
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "group_by"
