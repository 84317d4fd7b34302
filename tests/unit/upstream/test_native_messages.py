"""Forwarding a Messages request to a provider that serves Anthropic's Messages API itself
(``messages_api``): the request as forwarded, the headers it goes with, and the provider's
events read as the pieces a chat stream gives."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from app.apis.messages.request import native_request, parse_messages_request
from app.apis.messages.stream import TOOL_USE_PREFIX, MessagesStream
from app.apis.messages.wire import MessagesRequest
from app.completion.catalog import DEFAULT_ALIASES, Alias, load_catalog
from app.core.errors import UpstreamError
from app.upstream.base import CHOICE_END, ChoiceEnd, StartUsage, UpstreamCall, Usage
from app.upstream.config import ProviderConfig
from app.upstream.http11 import StreamingProvider
from app.upstream.messages_sse import MessagesEvents
from app.upstream.native_messages import ANTHROPIC_VERSION, NativeMessages
from app.upstream.openai_http import (
    CHAT_PATH,
    MESSAGES_PATH,
    RESPONSES_PATH,
    exchange,
    provider_headers,
    request_body,
)
from app.upstream.sse import LineSplitter, parse_data_line
from app.upstream.wire import (
    ChatRequest,
    Delta,
    Message,
    ToolCallDelta,
    ToolCallFunctionDelta,
    ToolUseDelta,
)
from bench.mock_upstream import MockUpstream

LIMITS = {"max_messages": 100, "max_message_chars": 100_000, "image_token_bound": 1000}
KEY_VAR = "SVC_TEST_ANTHROPIC_KEY"


def _identify(client_value: str | None) -> str:
    return f"svc_account_{client_value or ''}"


def _aliases(tmp_path: Path, base_url: str = "http://a/v1", flags: str = "") -> dict[str, Alias]:
    """svc-fast on a chat provider then a Messages one; svc-code on the chat one only."""
    path = tmp_path / "models.toml"
    path.write_text(
        f'[providers.chat]\nbase_url = "{base_url}"\n'
        f'[providers.claude]\nbase_url = "{base_url}"\nmessages_api = true\n'
        f'[aliases.svc-fast]\nupstreams = [{{ provider = "chat", model = "x" }}, '
        f'{{ provider = "claude", model = "claude-real" }}]\n{flags}\n'
        '[aliases.svc-code]\nupstreams = [{ provider = "chat", model = "z" }]\n'
    )
    return load_catalog(path).aliases


SENT: dict[str, Any] = {
    "model": "svc-fast",
    "max_tokens": 4000,
    "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "5m"}}
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Weather.", "signature": "c2ln"},
                {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "sunny"}],
        },
    ],
    "tools": [
        {
            "name": "get_weather",
            "input_schema": {"type": "object"},
            "cache_control": {"type": "ephemeral"},
        }
    ],
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    "thinking": {"type": "enabled", "budget_tokens": 2048},
    "top_k": 40,
    "top_p": 0.9,
    "temperature": 1,
    "stop_sequences": ["END"],
    "metadata": {"user_id": "end-user-7"},
    "stream": False,
    "service_tier": "auto",
    "a_field_svc_does_not_know": {"x": 1},
    "mcp_servers": [],
}


def _parse(aliases: dict[str, Alias], sent: dict[str, Any] = SENT) -> Any:
    return parse_messages_request(msgspec.json.encode(sent), aliases, identify=_identify, **LIMITS)


# -- the request ----------------------------------------------------------------------------


def test_the_forwarded_request_is_the_clients_with_what_svc_sets_replaced(
    tmp_path: Path,
) -> None:
    params = _parse(_aliases(tmp_path))
    native = params.native
    assert isinstance(native, NativeMessages)
    forwarded = msgspec.json.decode(native.body("claude-real", 3000))
    kept = ("system", "messages", "tools", "tool_choice", "top_k", "top_p", "temperature")
    assert forwarded == {
        "model": "claude-real",
        "max_tokens": 3000,
        "stream": True,
        # svc's identifier of the account (and of the client's end user), never the client's
        "metadata": {"user_id": "svc_account_end-user-7"},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "stop_sequences": ["END"],
        **{name: SENT[name] for name in kept},
    }  # no service_tier (the alias does not allow it), no unknown field, no mcp_servers
    assert params.request.safety_identifier == "svc_account_end-user-7"
    # the translation stays, for a failover to a chat provider
    assert params.request.messages[0].role == "system"


def test_top_k_reaches_a_messages_provider_always_and_the_translation_where_allowed(
    tmp_path: Path,
) -> None:
    for flags, translated in (("", None), ("allow_top_k = true", 40)):
        params = _parse(_aliases(tmp_path, flags=flags))
        assert msgspec.json.decode(params.native.body("m", 100))["top_k"] == 40
        assert msgspec.to_builtins(params.request).get("top_k") == translated


def test_service_tier_goes_on_where_the_alias_allows_it(tmp_path: Path) -> None:
    params = _parse(_aliases(tmp_path, flags="allow_service_tier = true"))
    assert msgspec.json.decode(params.native.body("m", 10))["service_tier"] == "auto"


def test_the_request_is_forwarded_byte_for_byte_inside_its_fields(tmp_path: Path) -> None:
    body = (
        b'{"model": "svc-fast", "max_tokens": 50, "messages": '
        b'[{"role": "user", "content": "caf\\u00e9  \\"q\\""}]}'
    )
    params = parse_messages_request(body, _aliases(tmp_path), **LIMITS)
    assert params.native.body("m", 7) == (
        b'{"model":"m","max_tokens":7,"stream":true,'
        b'"messages":[{"role": "user", "content": "caf\\u00e9  \\"q\\""}]}'
    )


def test_only_an_alias_with_a_messages_provider_keeps_the_request(tmp_path: Path) -> None:
    aliases = _aliases(tmp_path)
    assert aliases["svc-fast"].native_messages
    assert not aliases["svc-fast"].native_responses
    assert not aliases["svc-code"].native_messages
    assert _parse(aliases, {**SENT, "model": "svc-code"}).native is None


@pytest.mark.parametrize(
    ("thinking", "cap", "sent"),
    [
        (
            {"type": "enabled", "budget_tokens": 2048},
            4000,
            {"type": "enabled", "budget_tokens": 2048},
        ),
        # the reservation afforded less than the budget: lowered under the cap
        (
            {"type": "enabled", "budget_tokens": 2048},
            1500,
            {"type": "enabled", "budget_tokens": 1499},
        ),
        # no budget the API takes (1,024 at least) fits: no thinking
        ({"type": "enabled", "budget_tokens": 2048}, 1024, None),
        ({"type": "adaptive"}, 100, {"type": "adaptive"}),
        ({"type": "disabled"}, 100, {"type": "disabled"}),
    ],
)
def test_a_thinking_budget_stays_under_the_output_cap(
    thinking: dict[str, Any], cap: int, sent: dict[str, Any] | None
) -> None:
    body = msgspec.json.encode(
        {"model": "svc-fast", "max_tokens": 4000, "messages": [], "thinking": thinking}
    )
    req = msgspec.json.decode(body, type=MessagesRequest)
    native = native_request(body, req, DEFAULT_ALIASES["svc-fast"])
    forwarded = msgspec.json.decode(native.body("m", cap))
    assert forwarded.get("thinking") == sent
    assert "metadata" not in forwarded  # no identifier given: none sent


def test_only_a_messages_provider_is_sent_one(tmp_path: Path) -> None:
    native = _parse(_aliases(tmp_path)).native
    chat = ChatRequest(model="svc-fast", messages=[Message(role="user", content="hi")])
    call = UpstreamCall(model="m", request=chat, max_tokens=9, native=native)
    speaks = ProviderConfig(base_url="http://x/v1", messages_api=True)
    both = ProviderConfig(base_url="http://x/v1", messages_api=True, responses_api=True)
    plain = ProviderConfig(base_url="http://x/v1")
    assert exchange(call, speaks).path == MESSAGES_PATH
    assert exchange(call, both).path == MESSAGES_PATH
    assert exchange(call, speaks).body == native.body("m", 9)
    translated = exchange(call, plain)
    assert (translated.path, translated.parse) == (CHAT_PATH, parse_data_line)
    assert translated.body == request_body(call)
    assert exchange(UpstreamCall(model="m", request=chat, max_tokens=9), speaks).path == CHAT_PATH


# -- the headers ----------------------------------------------------------------------------


def test_a_messages_request_carries_the_key_as_anthropics_clients_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-ant-secret")
    config = ProviderConfig(base_url="http://x/v1", api_key_env=KEY_VAR, messages_api=True)
    headers = provider_headers(config, MESSAGES_PATH)
    assert headers["x-api-key"] == "sk-ant-secret"
    assert headers["anthropic-version"] == ANTHROPIC_VERSION == "2023-06-01"
    assert "authorization" not in headers
    # its other paths, and another provider's Messages path, take the key as a bearer token
    for path in (CHAT_PATH, RESPONSES_PATH):
        headers = provider_headers(config, path)
        assert headers["authorization"] == "Bearer sk-ant-secret"
        assert "x-api-key" not in headers
        assert "anthropic-version" not in headers
    plain = ProviderConfig(base_url="http://x/v1", api_key_env=KEY_VAR)
    assert "x-api-key" not in provider_headers(plain, MESSAGES_PATH)


def test_a_missing_key_is_logged_by_its_variables_name_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(KEY_VAR, raising=False)
    config = ProviderConfig(base_url="http://x/v1", api_key_env=KEY_VAR, messages_api=True)
    with caplog.at_level(logging.WARNING, logger="svc.upstream"):
        StreamingProvider(config)
    assert [r.getMessage() for r in caplog.records] == [
        f"provider key variable {KEY_VAR} is not set"
    ]
    headers = provider_headers(config, MESSAGES_PATH)
    assert "x-api-key" not in headers
    assert headers["anthropic-version"] == ANTHROPIC_VERSION


@pytest.fixture
async def mock() -> AsyncIterator[MockUpstream]:
    """The mock upstream on this test's event loop, writing 5 words."""
    server = MockUpstream(chunks=5)
    await server.start()
    yield server
    await server.stop()


async def _stream(mock: MockUpstream, call: UpstreamCall) -> list[object]:
    provider = StreamingProvider(
        ProviderConfig(base_url=mock.base_url, api_key_env=KEY_VAR, messages_api=True)
    )
    pieces: list[object] = []
    try:
        async for group in provider.stream(call):
            pieces += group
    finally:
        await provider.close()
    return pieces


async def test_the_provider_gets_the_request_and_headers_and_svc_reads_its_events(
    mock: MockUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-ant-secret")
    sent = {**SENT, "tool_choice": {"type": "auto"}, "thinking": {"type": "disabled"}}
    params = _parse(_aliases(tmp_path, mock.base_url), sent)
    call = UpstreamCall(
        model="claude-real", request=params.request, max_tokens=50, native=params.native
    )
    pieces = await _stream(mock, call)
    # message_start's counts come with the first output, the report at the end last
    assert pieces[0] == StartUsage(123, 1)
    assert pieces[1:6] == ["alpha ", "bravo ", "charlie ", "delta ", "echo "]
    assert pieces[6] == CHOICE_END
    assert isinstance(pieces[7], Usage)
    assert pieces[7].completion_tokens == 5
    request, headers = mock.stats.last_request, mock.stats.last_headers
    assert (request["model"], request["max_tokens"], request["stream"]) == ("claude-real", 50, True)
    assert request["messages"] == SENT["messages"]
    assert headers["x-api-key"] == "sk-ant-secret"
    assert headers["anthropic-version"] == ANTHROPIC_VERSION
    assert "authorization" not in headers
    # the same provider's chat path: the translation, with the bearer key
    chat_call = UpstreamCall(model="claude-real", request=params.request, max_tokens=50)
    await _stream(mock, chat_call)
    assert "messages" in mock.stats.last_request
    assert mock.stats.last_headers["authorization"] == "Bearer sk-ant-secret"
    assert "x-api-key" not in mock.stats.last_headers


@pytest.mark.parametrize("model", ["claude-real", "claude-slow1"])
async def test_the_mock_stops_before_a_stop_sequence_and_names_it_either_way(
    mock: MockUpstream, tmp_path: Path, model: str
) -> None:
    """The mock's reply stops before the first stop sequence its words hold, named as
    Anthropic does (``stop_sequence``) and as vLLM does (the finish chunk's ``stop_reason``);
    read as a ``ChoiceEnd`` naming it either way."""
    sent = {**SENT, "stop_sequences": ["zulu", "harlie"]}
    params = _parse(_aliases(tmp_path, mock.base_url), sent)
    native = UpstreamCall(model=model, request=params.request, max_tokens=50, native=params.native)
    chat = UpstreamCall(model=model, request=params.request, max_tokens=50)
    for call in (native, chat):
        pieces = await _stream(mock, call)
        if call is native:  # message_start's counts, with the first output
            assert type(pieces.pop(0)) is StartUsage
        assert pieces[:-1] == ["alpha ", "bravo ", "c", ChoiceEnd("harlie")]
        assert isinstance(pieces[-1], Usage)
        assert pieces[-1].completion_tokens == 3
    assert mock.stats.last_request["stop"] == ["zulu", "harlie"]


async def test_a_provider_error_event_fails_the_stream(mock: MockUpstream, tmp_path: Path) -> None:
    params = _parse(_aliases(tmp_path, mock.base_url), {**SENT, "model": "svc-fast"})
    call = UpstreamCall(
        model="m-drop2", request=params.request, max_tokens=50, native=params.native
    )
    with pytest.raises(UpstreamError, match="overloaded_error"):
        await _stream(mock, call)


# -- the events -----------------------------------------------------------------------------


def _sse(kind: str, **fields: object) -> bytes:
    body = msgspec.json.encode({"type": kind, **fields})
    return b"event: " + kind.encode() + b"\ndata: " + body + b"\n\n"


def _pieces(*events: bytes) -> tuple[list[object], bool]:
    splitter = LineSplitter(MessagesEvents().parse)
    pieces: list[object] = []
    for event in events:  # a read per event, split mid-way to show lines are joined
        half = len(event) // 2
        pieces += splitter.feed(event[:half])
        pieces += splitter.feed(event[half:])
    return pieces, splitter.done


def _start(**usage: int) -> bytes:
    message = {
        "id": "msg_01XFD",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-real",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return _sse("message_start", message=message)


def _text_delta(index: int, text: str) -> bytes:
    return _sse("content_block_delta", index=index, delta={"type": "text_delta", "text": text})


def _json_delta(index: int, text: str) -> bytes:
    delta = {"type": "input_json_delta", "partial_json": text}
    return _sse("content_block_delta", index=index, delta=delta)


def _message_delta(reason: str, **usage: int) -> bytes:
    return _sse("message_delta", delta={"stop_reason": reason, "stop_sequence": None}, usage=usage)


def test_text_with_cache_usage_becomes_text_then_the_end_with_the_prompt_whole() -> None:
    pieces, done = _pieces(
        _start(
            input_tokens=21,
            cache_creation_input_tokens=188,
            cache_read_input_tokens=1500,
            output_tokens=1,
        ),
        _sse("ping"),
        _sse("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        _text_delta(0, "Hel"),
        _text_delta(0, ""),
        _text_delta(0, "lo"),
        _sse("content_block_stop", index=0),
        _message_delta("end_turn", output_tokens=15),
        _sse("message_stop"),
        _text_delta(0, "after the end"),
    )
    details = {"cached_tokens": 1500, "cache_creation_input_tokens": 188}
    # message_start's counts come with the first output (what a client that leaves before
    # message_delta is billed), the report at the end last
    start = StartUsage(21 + 1500 + 188, 1, details)
    assert pieces == [start, "Hel", "lo", CHOICE_END, Usage(21 + 1500 + 188, 15, details)]
    assert done


def test_a_message_deltas_input_counts_replace_the_starts() -> None:
    pieces, _done = _pieces(
        _start(input_tokens=10, cache_read_input_tokens=0, output_tokens=1),
        _text_delta(0, "x"),
        _message_delta("end_turn", input_tokens=12, cache_read_input_tokens=4, output_tokens=3),
    )
    assert pieces[-1] == Usage(16, 3, {"cached_tokens": 4})


def test_tool_use_blocks_become_tool_calls_with_the_providers_ids() -> None:
    def block(index: int, tool_id: str, name: str) -> bytes:
        tool = {"type": "tool_use", "id": tool_id, "name": name, "input": {}}
        return _sse("content_block_start", index=index, content_block=tool)

    pieces, done = _pieces(
        _start(input_tokens=50, output_tokens=1),
        _sse("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        _text_delta(0, "Let me check."),
        _sse("content_block_stop", index=0),
        block(1, "toolu_01A", "get_weather"),
        _json_delta(1, ""),
        _json_delta(1, '{"city":'),
        _json_delta(1, ' "Paris"}'),
        _sse("content_block_stop", index=1),
        block(2, "toolu_01B", "get_time"),
        _json_delta(2, "{}"),
        _sse("content_block_stop", index=2),
        _message_delta("tool_use", output_tokens=40),
        _sse("message_stop"),
    )

    def begins(index: int, tool_id: str, name: str) -> Delta:
        fn = ToolCallFunctionDelta(name=name, arguments="")
        call = ToolUseDelta(index=index, id=tool_id, type="function", function=fn)
        return Delta(tool_calls=[call])

    def more(index: int, text: str) -> Delta:
        fn = ToolCallFunctionDelta(arguments=text)
        return Delta(tool_calls=[ToolCallDelta(index=index, function=fn)])

    assert pieces == [
        StartUsage(50, 1),
        "Let me check.",
        begins(0, "toolu_01A", "get_weather"),
        more(0, '{"city":'),
        more(0, ' "Paris"}'),
        begins(1, "toolu_01B", "get_time"),
        more(1, "{}"),
        Delta(finish_reason="tool_calls"),
        CHOICE_END,
        Usage(50, 40),
    ]
    assert type(pieces[2].tool_calls[0]) is ToolUseDelta  # type: ignore[union-attr]
    assert done


def test_thinking_is_reasoning_and_a_cut_is_length() -> None:
    thinking = {"type": "thinking", "thinking": "", "signature": ""}
    pieces, done = _pieces(
        _start(input_tokens=5, output_tokens=1),
        _sse("content_block_start", index=0, content_block=thinking),
        _sse("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "Hm"}),
        _sse("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "x"}),
        _sse("content_block_stop", index=0),
        _sse("content_block_start", index=1, content_block={"type": "redacted_thinking"}),
        _sse("content_block_start", index=2, content_block={"type": "text", "text": ""}),
        _text_delta(2, "cut"),
        _message_delta("max_tokens", output_tokens=9),
        _sse("message_stop"),
    )
    assert pieces == [
        StartUsage(5, 1),
        Delta(reasoning_content="Hm"),
        "cut",
        Delta(finish_reason="length"),
        CHOICE_END,
        Usage(5, 9),
    ]
    assert done


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("end_turn", None),
        ("stop_sequence", None),
        ("pause_turn", None),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "content_filter"),
        ("tool_use", "tool_calls"),
    ],
)
def test_each_stop_reason_ends_as_chat_would_say_it(reason: str, finish: str | None) -> None:
    pieces, _done = _pieces(
        _text_delta(0, "a"), _message_delta(reason, input_tokens=3, output_tokens=1)
    )
    end = [CHOICE_END] if finish is None else [Delta(finish_reason=finish), CHOICE_END]
    assert pieces == ["a", *end, Usage(3, 1)]


def test_a_stop_sequence_is_named_on_the_choices_end() -> None:
    delta = {"stop_reason": "stop_sequence", "stop_sequence": "\n\nHuman:"}
    pieces, _done = _pieces(
        _text_delta(0, "a"),
        _sse("message_delta", delta=delta, usage={"input_tokens": 3, "output_tokens": 1}),
    )
    assert pieces == ["a", ChoiceEnd("\n\nHuman:"), Usage(3, 1)]


def test_a_stream_cut_before_message_stop_is_not_done() -> None:
    pieces, done = _pieces(_start(input_tokens=5), _text_delta(0, "half"))
    assert (pieces, done) == ([StartUsage(5, 0), "half"], False)


@pytest.mark.parametrize(
    "event",
    [
        _sse("error", error={"type": "overloaded_error", "message": "Overloaded"}),
        _sse("error", error={"type": "x" * 500}),
        _sse("error"),
        b"data: {not json\n\n",
        _json_delta(7, '{"a": 1}'),  # a block that never began
    ],
)
def test_a_failure_mid_stream_is_an_upstream_error(event: bytes) -> None:
    with pytest.raises(UpstreamError) as failed:
        LineSplitter(MessagesEvents().parse).feed(_text_delta(0, "a") + event)
    assert "x" * 50 not in failed.value.reason  # nothing of the provider's making but a type


def test_odd_streams_are_read_as_far_as_they_make_sense() -> None:
    tool = {"type": "tool_use", "id": "toolu_01C", "name": "f", "input": {"a": 1}}
    pieces, done = _pieces(
        b": a comment\n\n",
        _sse("a_future_event", index=0),
        _sse("content_block_start", index=0, content_block={"type": "text", "text": "pre"}),
        _sse("content_block_start", index=1, content_block=tool),  # input given at the start
        _sse("content_block_delta", index=1, delta={"type": "citations_delta"}),
        _sse("content_block_start", index=2),  # no block
        # usage that makes no sense: negative counts are none, and without the prompt's
        # count there is no report
        _message_delta("end_turn", input_tokens=-5, cache_read_input_tokens=-1, output_tokens=2),
        _message_delta("end_turn", input_tokens=7, output_tokens=3),  # a second: the usage
        _sse("message_stop"),
    )
    fn = ToolCallFunctionDelta(name="f", arguments='{"a":1}')
    assert pieces == [
        "pre",
        Delta(tool_calls=[ToolUseDelta(index=0, id="toolu_01C", type="function", function=fn)]),
        Delta(finish_reason="tool_calls"),
        CHOICE_END,
        Usage(7, 3),
    ]
    assert done


def test_a_stream_without_its_message_delta_ends_at_message_stop() -> None:
    pieces, done = _pieces(_start(input_tokens=8, output_tokens=1), _sse("message_stop"))
    assert (pieces, done) == ([CHOICE_END, Usage(8, 1)], True)
    pieces, done = _pieces(_sse("message_stop"))
    assert (pieces, done) == ([CHOICE_END], True)  # nothing reported: svc estimates


# -- the tool ids the client sees -----------------------------------------------------------


def _tool_start(call: ToolCallDelta) -> dict[str, Any]:
    stream = MessagesStream(model="svc-fast", requested="svc-fast")
    out = stream.piece(Delta(tool_calls=[call]))
    data = out.split(b"data: ", 1)[1].split(b"\n", 1)[0]
    block: dict[str, Any] = msgspec.json.decode(data)["content_block"]
    return block


def test_a_messages_providers_tool_id_is_kept_and_any_other_is_svcs() -> None:
    fn = ToolCallFunctionDelta(name="f", arguments="")
    kept = _tool_start(ToolUseDelta(index=0, id="toolu_01A", type="function", function=fn))
    assert kept["id"] == "toolu_01A"
    chat = _tool_start(ToolCallDelta(index=0, id="call_abc", type="function", function=fn))
    assert chat["id"].startswith(TOOL_USE_PREFIX)
    for odd in ('to"lu', "x" * 200, ""):
        block = _tool_start(ToolUseDelta(index=0, id=odd, type="function", function=fn))
        assert block["id"].startswith(TOOL_USE_PREFIX)
