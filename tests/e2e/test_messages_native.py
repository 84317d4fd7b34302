"""A provider that serves Anthropic's Messages API itself (``messages_api = true``): svc
forwards ``/v1/messages`` to it as a Messages request (the mock upstream as a real HTTP
server, recording what it was sent and with which headers), reads its events, and answers
with svc's own stream, metered from the provider's usage (cache reads and writes priced
apart) as any other request; a failover between it and a chat provider goes either way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from bench.mock_upstream import WORDS, MockProcess, start_in_subprocess
from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.e2e

PROVIDER_KEY = "mock-provider-key"
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
# svc-smart's prices (credits per 1,000 tokens): uncached input, cached input, cache writes,
# output: each part of the provider's usage at its own
RATES = (50, 10, 70, 150)
FUNDS = 1_000_000


def _models_file(path: Path, base_url: str) -> Path:
    """One mock behind two providers: ``claude`` speaks Messages, ``chat`` only Chat
    Completions. svc-fast and svc-code start on claude (svc-code's first fails, then the
    chat provider serves); svc-smart's chat upstream fails over to claude, which reports 60 %
    of the prompt read from its cache and 20 % written to it."""
    path.write_text(
        f'[providers.claude]\nbase_url = "{base_url}"\napi_key_env = "MOCK_API_KEY"\n'
        "messages_api = true\nfirst_byte_timeout_s = 2.0\n\n"
        f'[providers.chat]\nbase_url = "{base_url}"\napi_key_env = "MOCK_API_KEY"\n\n'
        '[aliases.svc-fast]\nupstreams = [{ provider = "claude", model = "native-model" }]\n\n'
        "[aliases.svc-code]\nupstreams = [\n"
        '  { provider = "claude", model = "native-fail500" },\n'
        '  { provider = "chat", model = "chat-model" },\n]\n\n'
        "[aliases.svc-smart]\nupstreams = [\n"
        '  { provider = "chat", model = "chat-fail500" },\n'
        '  { provider = "claude", model = "native-cached60-writes20" },\n]\n'
        f"cached_input_price = {RATES[1]}\ncache_write_price = {RATES[2]}\n"
    )
    return path


@pytest.fixture(scope="module")
def mock() -> Iterator[MockProcess]:
    process = start_in_subprocess(chunks=20)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory, mock: MockProcess) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("messages-native")
    path = _models_file(tmp / "models.toml", mock.base_url)
    srv = start_server(tmp, extra_env={"SVC_MODELS_FILE": str(path), "MOCK_API_KEY": PROVIDER_KEY})
    yield srv
    stop_server(srv.process)


def _last(mock: MockProcess) -> tuple[dict[str, Any], dict[str, str]]:
    """The last request the mock received, and its headers."""
    stats = httpx.get(mock.base_url.removesuffix("/v1") + "/_stats").json()
    return dict(stats["last_request"]), dict(stats["last_headers"])


def _client(server: Server, credits: int = FUNDS) -> tuple[anthropic.Anthropic, str]:
    pid = server.new_account(credits)
    key = server.new_key(pid)
    return anthropic.Anthropic(base_url=server.root_url, api_key=key, max_retries=0), pid


def _raw(client: anthropic.Anthropic, **params: Any) -> tuple[list[Any], dict[str, Any]]:
    """The raw events of a streamed message, and the ``svc`` object of its message_stop."""
    events = list(client.messages.create(stream=True, **params))
    assert events[-1].type == "message_stop"
    return events, dict((events[-1].model_extra or {})["svc"])


def test_a_message_is_forwarded_as_the_client_sent_it_and_charged_the_providers_usage(
    native: Server, mock: MockProcess
) -> None:
    client, pid = _client(native)
    before = native.balance(pid)
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    question = {
        "role": "user",
        "content": [{"type": "text", "text": "Say hi.", "cache_control": {"type": "ephemeral"}}],
    }
    with client.messages.stream(
        model="svc-fast",
        max_tokens=2000,
        system=system,  # type: ignore[arg-type]
        messages=[question],  # type: ignore[list-item]
        thinking={"type": "enabled", "budget_tokens": 1024},
        extra_body={"top_k": 40},  # this SDK has no top_k of its own
        stop_sequences=["STOP"],
        metadata={"user_id": "end-user-7"},
    ) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert text.split() == (WORDS * 3)[:20]  # the mock's 20 words
    assert [block.type for block in message.content] == ["text"]  # thinking: billed, not shown
    assert message.id.startswith("msg_svc_")
    assert message.model == "svc-fast"
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 22  # the provider's count: 20 words, 2 of thinking

    sent, headers = _last(mock)
    assert (sent["model"], sent["max_tokens"], sent["stream"]) == ("native-model", 2000, True)
    assert sent["system"] == system
    assert sent["messages"] == [question]  # cache_control and all
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert (sent["top_k"], sent["stop_sequences"]) == (40, ["STOP"])
    user_id = sent["metadata"]["user_id"]
    assert user_id.startswith("svc_")
    assert "end-user-7" not in user_id
    assert headers["x-api-key"] == PROVIDER_KEY
    assert headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers

    # the charge is what the stream said: the raw events show it on message_stop
    after_one = native.balance(pid)
    assert before - after_one >= 1
    events, svc = _raw(client, model="svc-fast", max_tokens=100, messages=[question])  # type: ignore[list-item]
    assert after_one - native.balance(pid) == svc["credits_used"] >= 1
    assert svc["requested_model"] == "svc-fast"
    wire = json.dumps([event.model_dump() for event in events])
    for upstream_name in ("native-model", "msg_mock"):
        assert upstream_name not in wire


def test_the_output_cap_sent_is_what_the_reservation_affords(
    native: Server, mock: MockProcess
) -> None:
    client, pid = _client(native)
    events, svc = _raw(
        client,
        model="svc-fast",
        max_tokens=8000,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"svc-max-credits": "10"},  # 10 credits hold far fewer than 8,000
    )
    sent, _headers = _last(mock)
    # lowered to what 10 credits hold beside the prompt, at 15 per 1,000 output tokens
    assert 20 <= sent["max_tokens"] < 10 * 1000 // 15
    assert FUNDS - native.balance(pid) == svc["credits_used"] <= 10
    assert events[-2].delta.stop_reason == "end_turn"


def test_a_tool_round_trip_keeps_the_providers_tool_id(native: Server, mock: MockProcess) -> None:
    client, pid = _client(native)
    question = {"role": "user", "content": "Weather in Paris?"}
    with client.messages.stream(
        model="svc-fast",
        max_tokens=500,
        messages=[question],  # type: ignore[list-item]
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "any"},
    ) as stream:
        for _event in stream:
            pass
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use"
    (call,) = [block for block in first.content if block.type == "tool_use"]
    assert (call.name, call.input) == ("get_weather", {"city": "Paris"})
    assert call.id == "toolu_mock1"  # the provider's: the conversation sends it back to it

    balance = native.balance(pid)
    turns = [
        question,
        {"role": "assistant", "content": [call.model_dump()]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        },
    ]
    events, svc = _raw(
        client,
        model="svc-fast",
        max_tokens=500,
        messages=turns,
        tools=[WEATHER],
    )
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text.split()[:2] == ["alpha", "bravo"]
    assert balance - native.balance(pid) == svc["credits_used"]
    sent, _headers = _last(mock)
    assert sent["messages"] == turns  # the history as the client sent it, the ids the provider's


def test_a_failed_messages_provider_fails_over_to_a_chat_provider(
    native: Server, mock: MockProcess
) -> None:
    client, pid = _client(native)
    events, svc = _raw(
        client,
        model="svc-code",
        max_tokens=300,
        system="Be brief.",
        messages=[{"role": "user", "content": "hi"}],
        extra_body={"top_k": 5},
    )
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text.split()[:2] == ["alpha", "bravo"]
    assert FUNDS - native.balance(pid) == svc["credits_used"] >= 1
    sent, headers = _last(mock)
    assert sent["model"] == "chat-model"  # the translation, as any chat provider gets it
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert "top_k" not in sent
    assert headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    assert "x-api-key" not in headers


def _formula(usage: anthropic.types.Usage) -> int:
    """docs/api.md's charge, from the usage the client was shown."""
    units = (
        usage.input_tokens * RATES[0]
        + (usage.cache_read_input_tokens or 0) * RATES[1]
        + (usage.cache_creation_input_tokens or 0) * RATES[2]
        + usage.output_tokens * RATES[3]
    )
    return max(1, -(-units // 1000))


def test_cached_usage_is_priced_at_the_cached_prices_after_a_failover_from_chat(
    native: Server, mock: MockProcess
) -> None:
    client, pid = _client(native)
    system = "You are terse. " * 400
    question = {"role": "user", "content": "question: " + "more " * 300}
    with client.messages.stream(
        model="svc-smart",
        max_tokens=1000,
        system=system,
        messages=[question],  # type: ignore[list-item]
    ) as stream:
        message = stream.get_final_message()
    sent, _headers = _last(mock)
    assert sent["model"] == "native-cached60-writes20"
    stats = httpx.get(mock.base_url.removesuffix("/v1") + "/_stats").json()
    assert stats["seen_models"]["chat-fail500"] >= 1  # tried first, and failed
    # what the mock reported: 60 % of its prompt count read from the cache, 20 % written
    total = len(json.dumps(sent["messages"]) + json.dumps(sent["system"])) // 4 + 4
    read, written = total * 60 // 100, total * 20 // 100
    usage = message.usage
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (read, written)
    assert usage.input_tokens == total - read - written
    assert usage.output_tokens == 20
    charged = FUNDS - native.balance(pid)
    assert charged == _formula(usage)
    # the same tokens at the input price would have cost more
    assert charged < -(-(total * RATES[0] + 20 * RATES[3]) // 1000)


def _usages(events: list[Any]) -> tuple[Any, Any]:
    """The usage of a stream's message_start and of its message_delta."""
    start = next(e for e in events if e.type == "message_start").message.usage
    delta = next(e for e in events if e.type == "message_delta").usage
    return start, delta


def test_message_start_carries_the_providers_input_counts(
    native: Server, mock: MockProcess
) -> None:
    """A Messages provider's own message_start counts reach the client's message_start (as
    Anthropic's do: LangChain JS's ChatAnthropic reads the input there), its cache reads and
    writes apart; the output count stays 0 (message_delta has it: no client counts it twice)."""
    client, _ = _client(native)
    question = {"role": "user", "content": "question: " + "more " * 300}
    events, _svc = _raw(
        client,
        model="svc-smart",
        max_tokens=300,
        system="You are terse. " * 400,
        messages=[question],
    )
    sent, _headers = _last(mock)
    assert sent["model"] == "native-cached60-writes20"
    total = len(json.dumps(sent["messages"]) + json.dumps(sent["system"])) // 4 + 4
    read, written = total * 60 // 100, total * 20 // 100
    start, delta = _usages(events)
    assert (start.input_tokens, start.cache_read_input_tokens) == (total - read - written, read)
    assert start.cache_creation_input_tokens == written
    assert start.output_tokens == 0
    assert (delta.input_tokens, delta.cache_read_input_tokens) == (total - read - written, read)
    assert delta.output_tokens >= 1


def test_message_start_counts_nothing_from_a_chat_provider(native: Server) -> None:
    """A chat provider reports only at the end: message_start carries no count (not svc's
    estimate of the prompt); message_delta carries the usage billed."""
    client, _ = _client(native)
    events, _svc = _raw(
        client, model="svc-code", max_tokens=300, messages=[{"role": "user", "content": "hi"}]
    )
    start, delta = _usages(events)
    assert start.input_tokens == start.output_tokens == 0
    assert not start.cache_read_input_tokens
    assert not start.cache_creation_input_tokens
    assert delta.input_tokens >= 1
