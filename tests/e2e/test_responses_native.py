"""A provider that serves the Responses API itself: svc forwards ``/v1/responses`` to it as a
Responses request (the mock upstream as a real HTTP server), reads its events, and answers
with svc's own stream, metered from the provider's usage as any other request."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from bench.mock_upstream import WORDS, MockProcess, start_in_subprocess
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_upstreams import models_file

pytestmark = pytest.mark.e2e

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
UPSTREAM_IDS = ("resp_mock", "msg_mock1", "fc_mock1", "native-model")


@pytest.fixture(scope="module")
def mock() -> Iterator[MockProcess]:
    process = start_in_subprocess(chunks=20)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory, mock: MockProcess) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("native")
    path = models_file(
        tmp / "models.toml",
        mock.base_url,
        {
            "svc-fast": ["native-model"],
            "svc-code": ["native-fail500", "native-model-calltool"],
            "svc-smart": ["native-drop4"],
        },
        responses_api=True,
        first_byte_timeout_s=2.0,
    )
    srv = start_server(
        tmp, extra_env={"SVC_MODELS_FILE": str(path), "MOCK_API_KEY": "mock-provider-key"}
    )
    yield srv
    stop_server(srv.process)


def _last_request(mock: MockProcess) -> dict[str, object]:
    stats = httpx.get(mock.base_url.removesuffix("/v1") + "/_stats").json()
    return dict(stats["last_request"])


def _client(server: Server, credits: int = 100_000) -> tuple[openai.OpenAI, str]:
    pid = server.new_account(credits)
    return openai.OpenAI(base_url=server.base_url, api_key=server.new_key(pid), max_retries=0), pid


def test_a_response_is_forwarded_as_one_and_charged_the_providers_usage(
    native: Server, mock: MockProcess
) -> None:
    client, pid = _client(native)
    before = native.balance(pid)
    stream = client.responses.create(
        model="svc-fast",
        instructions="Be brief.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Say hi."}]}],
        max_output_tokens=200,
        metadata={"job": "7"},
        store=True,
        stream=True,
    )
    events = list(stream)
    sent = _last_request(mock)
    assert sent["model"] == "native-model"
    assert (sent["stream"], sent["store"]) == (True, False)
    assert sent["max_output_tokens"] == 200
    assert sent["instructions"] == "Be brief."
    assert "metadata" not in sent  # it goes with store, which the alias does not allow
    assert sent["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Say hi."}]}
    ]
    assert "messages" not in sent

    final = events[-1]
    assert final.type == "response.completed"
    response = final.response  # type: ignore[union-attr]
    assert response.output_text == "".join(
        e.delta for e in events if e.type == "response.output_text.delta"
    )
    assert response.output_text.split() == (WORDS * 3)[:20]  # the mock's 20 chunks
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert response.id.startswith("resp_svc_")
    assert response.model == "svc-fast"
    assert response.usage is not None
    assert response.usage.output_tokens == 20  # the provider's count
    meta = response.model_extra["svc"]  # type: ignore[index]
    assert before - native.balance(pid) == meta["credits_used"] >= 1
    wire = json.dumps([e.model_dump() for e in events])
    for upstream_id in UPSTREAM_IDS:
        assert upstream_id not in wire


def test_a_function_call_after_failover_to_the_next_upstream(
    native: Server, mock: MockProcess
) -> None:
    client, _pid = _client(native)
    question = {"role": "user", "content": "Weather in Paris?"}
    with client.responses.stream(model="svc-code", input=[question], tools=[WEATHER]) as stream:
        for _event in stream:
            pass
        first = stream.get_final_response()
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    assert call.id is not None
    assert call.id.startswith("fc_")
    assert _last_request(mock)["model"] == "native-model-calltool"
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    with client.responses.stream(
        model="svc-fast", input=[question, call.model_dump(exclude_none=True), result]
    ) as stream:
        for _event in stream:
            pass
        second = stream.get_final_response()
    assert second.status == "completed"
    # the history went upstream as the client sent it
    forwarded = _last_request(mock)["input"]
    assert isinstance(forwarded, list)
    assert forwarded[1]["type"] == "function_call"
    assert forwarded[2] == result


def test_a_cut_response_is_incomplete(native: Server) -> None:
    client, _pid = _client(native)
    events = list(
        client.responses.create(model="svc-fast", input="Go on.", max_output_tokens=16, stream=True)
    )
    response = events[-1].response  # type: ignore[union-attr]
    assert events[-1].type == "response.incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert len(response.output_text.split()) == 16
    assert response.model_extra["svc"]["credits_used"] >= 1  # type: ignore[index]


def test_a_provider_failing_mid_stream_ends_in_response_failed(native: Server) -> None:
    client, pid = _client(native)
    before = native.balance(pid)
    events = list(client.responses.create(model="svc-smart", input="Go on.", stream=True))
    assert events[-1].type == "response.failed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text.split() == ["alpha", "bravo", "charlie", "delta"]
    charged = before - native.balance(pid)
    assert charged == events[-1].response.model_extra["svc"]["credits_used"]  # type: ignore[union-attr]


def test_test_keys_never_reach_the_provider(native: Server, mock: MockProcess) -> None:
    pid = native.new_account(0)
    client = openai.OpenAI(
        base_url=native.base_url, api_key=native.new_key(pid, environment="test"), max_retries=0
    )
    before = httpx.get(mock.base_url.removesuffix("/v1") + "/_stats").json()["requests"]
    events = list(client.responses.create(model="svc-fast", input="hi", stream=True))
    assert events[-1].type == "response.completed"
    assert httpx.get(mock.base_url.removesuffix("/v1") + "/_stats").json()["requests"] == before


def test_chat_completions_still_go_to_chat_completions(native: Server, mock: MockProcess) -> None:
    client, _pid = _client(native)
    stream = client.chat.completions.create(
        model="svc-fast", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.split()[:2] == ["alpha", "bravo"]
    assert "messages" in _last_request(mock)
