"""Forwarding a Responses request to a provider that serves the Responses API itself: the
request as forwarded, and the provider's events read as the pieces a chat stream gives."""

from __future__ import annotations

import msgspec
import pytest

from app.apis.responses.request import native_request, parse_responses_request
from app.apis.responses.wire import ResponsesRequest
from app.completion.catalog import DEFAULT_ALIASES, load_catalog
from app.core.errors import UpstreamError
from app.upstream.base import CHOICE_END, UpstreamCall, Usage
from app.upstream.config import ProviderConfig
from app.upstream.openai_http import (
    CHAT_PATH,
    PATHS,
    RESPONSES_PATH,
    exchange,
    provider_headers,
    request_body,
)
from app.upstream.responses_sse import ResponsesEvents
from app.upstream.sse import FinalPieces, LineSplitter, parse_data_line
from app.upstream.wire import ChatRequest, Delta, Message, ToolCallDelta, ToolCallFunctionDelta

FAST = DEFAULT_ALIASES["svc-fast"]
LIMITS = {"max_messages": 100, "max_message_chars": 100_000, "image_token_bound": 1000}


def _sse(kind: str, **fields: object) -> bytes:
    body = msgspec.json.encode({"type": kind, "sequence_number": 0, **fields})
    return b"event: " + kind.encode() + b"\ndata: " + body + b"\n\n"


def test_the_forwarded_request_is_the_clients_with_what_svc_sets_replaced() -> None:
    sent = {
        "model": "svc-fast",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ],
        "max_output_tokens": 500,
        "stream": True,
        "store": True,
        "reasoning": {"effort": "low"},
        "metadata": {"job": "7"},
        "a_field_svc_does_not_know": 1,
    }
    native = native_request(
        msgspec.json.decode(msgspec.json.encode(sent), type=ResponsesRequest), FAST
    )
    forwarded = msgspec.json.decode(native.body("real-model", 123))
    assert forwarded == {
        "model": "real-model",
        "max_output_tokens": 123,
        "stream": True,
        "store": False,
        "instructions": "Be brief.",
        "input": sent["input"],
        "reasoning": {"effort": "low"},
    }  # no metadata: it goes with store (tests/unit/upstream/test_forwarded_fields.py)
    bare = native_request(ResponsesRequest(model="svc-fast", input="hi"), FAST)
    assert msgspec.json.decode(bare.body("m", 16)) == {
        "model": "m",
        "max_output_tokens": 16,
        "stream": True,
        "store": False,
        "input": "hi",
    }


def test_only_a_provider_that_serves_responses_is_sent_one() -> None:
    native = native_request(ResponsesRequest(model="svc-fast", input="hi"), FAST)
    chat = ChatRequest(model="svc-fast", messages=[Message(role="user", content="hi")])
    call = UpstreamCall(model="m", request=chat, max_tokens=9, native=native)
    speaks = ProviderConfig(base_url="http://x/v1", responses_api=True)
    plain = ProviderConfig(base_url="http://x/v1")
    assert exchange(call, speaks).path == RESPONSES_PATH
    assert exchange(call, speaks).body == native.body("m", 9)
    translated = exchange(call, plain)
    assert (translated.path, translated.parse) == (CHAT_PATH, parse_data_line)
    assert translated.body == request_body(call)
    chat_call = UpstreamCall(model="m", request=chat, max_tokens=9)
    assert exchange(chat_call, speaks).path == CHAT_PATH


def test_a_responses_request_carries_the_key_as_a_bearer_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each path's headers come from the API of that path (``NativeRequest.headers``): the
    Responses API takes the key as chat completions do, and nothing of Anthropic's."""
    monkeypatch.setenv("SVC_TEST_RESPONSES_KEY", "sk-secret")
    config = ProviderConfig(
        base_url="http://x/v1", api_key_env="SVC_TEST_RESPONSES_KEY", responses_api=True
    )
    for path in PATHS:
        headers = provider_headers(config, path)
        assert headers["authorization"] == "Bearer sk-secret", path
        assert not {"x-api-key", "anthropic-version"} & set(headers), path
    assert provider_headers(config, RESPONSES_PATH) == provider_headers(config, CHAT_PATH)


def test_an_alias_is_native_when_one_of_its_providers_serves_responses(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "models.toml"
    path.write_text(
        '[providers.a]\nbase_url = "http://a/v1"\nresponses_api = true\n'
        '[providers.b]\nbase_url = "http://b/v1"\n'
        '[aliases.svc-fast]\nupstreams = [{ provider = "b", model = "x" }, '
        '{ provider = "a", model = "y" }]\n'
        '[aliases.svc-code]\nupstreams = [{ provider = "b", model = "z" }]\n'
    )
    aliases = load_catalog(path).aliases
    assert aliases["svc-fast"].native_responses
    assert not aliases["svc-code"].native_responses
    body = b'{"model": "svc-fast", "input": "hi"}'
    assert parse_responses_request(body, aliases, **LIMITS).chat.native is not None
    body = b'{"model": "svc-code", "input": "hi"}'
    assert parse_responses_request(body, aliases, **LIMITS).chat.native is None


def _pieces(*events: bytes) -> tuple[list[object], bool]:
    splitter = LineSplitter(ResponsesEvents().parse)
    pieces: list[object] = []
    for event in events:  # a read per event, split mid-way to show lines are joined
        half = len(event) // 2
        pieces += splitter.feed(event[:half])
        pieces += splitter.feed(event[half:])
    return pieces, splitter.done


USAGE = {
    "input_tokens": 12,
    "output_tokens": 3,
    "input_tokens_details": {"cached_tokens": 4},
    "output_tokens_details": {"reasoning_tokens": None},
    "total_tokens": 15,
}


def test_text_events_become_text_then_the_end_with_usage() -> None:
    message = {"type": "message", "id": "msg_up", "role": "assistant", "content": []}
    pieces, done = _pieces(
        _sse("response.created", response={"id": "resp_upstream", "status": "in_progress"}),
        _sse("response.output_item.added", output_index=0, item=message),
        _sse("response.output_text.delta", item_id="msg_up", delta="Hel"),
        _sse("response.output_text.delta", item_id="msg_up", delta=""),
        _sse("response.output_text.delta", item_id="msg_up", delta="lo"),
        _sse("response.output_text.done", item_id="msg_up", text="Hello"),
        _sse("response.completed", response={"status": "completed", "usage": USAGE}),
        _sse("response.output_text.delta", item_id="msg_up", delta="after the end"),
    )
    assert pieces == ["Hel", "lo", CHOICE_END, Usage(12, 3, {"cached_tokens": 4})]
    assert done


def test_function_calls_become_tool_calls_numbered_as_they_begin() -> None:
    def call(item_id: str, call_id: str, name: str) -> bytes:
        item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name}
        return _sse("response.output_item.added", output_index=0, item=item)

    def args(item_id: str, delta: str) -> bytes:
        return _sse("response.function_call_arguments.delta", item_id=item_id, delta=delta)

    pieces, done = _pieces(
        call("fc_a", "call_1", "weather"),
        args("fc_a", '{"city":'),
        call("fc_b", "call_2", "time"),
        args("fc_b", "{}"),
        args("fc_a", '"Paris"}'),
        _sse("response.completed", response={"status": "completed", "usage": USAGE}),
    )

    def begins(index: int, call_id: str, name: str) -> Delta:
        fn = ToolCallFunctionDelta(name=name, arguments="")
        return Delta(
            tool_calls=[ToolCallDelta(index=index, id=call_id, type="function", function=fn)]
        )

    def more(index: int, text: str) -> Delta:
        fn = ToolCallFunctionDelta(arguments=text)
        return Delta(tool_calls=[ToolCallDelta(index=index, function=fn)])

    assert pieces == [
        begins(0, "call_1", "weather"),
        more(0, '{"city":'),
        begins(1, "call_2", "time"),
        more(1, "{}"),
        more(0, '"Paris"}'),
        Delta(finish_reason="tool_calls"),
        CHOICE_END,
        Usage(12, 3, {"cached_tokens": 4}),
    ]
    assert done


@pytest.mark.parametrize(
    ("reason", "finish"), [("max_output_tokens", "length"), ("content_filter", "content_filter")]
)
def test_an_incomplete_response_ends_as_chat_would_say_it(reason: str, finish: str) -> None:
    end = {"status": "incomplete", "incomplete_details": {"reason": reason}, "usage": USAGE}
    pieces, done = _pieces(
        _sse("response.output_text.delta", delta="cut"), _sse("response.incomplete", response=end)
    )
    assert pieces == [
        "cut",
        Delta(finish_reason=finish),
        CHOICE_END,
        Usage(12, 3, {"cached_tokens": 4}),
    ]
    assert done


def test_refusals_and_reasoning_are_deltas() -> None:
    pieces, done = _pieces(
        _sse("response.reasoning_summary_text.delta", delta="thinking"),
        _sse("response.refusal.delta", delta="I can't"),
    )
    assert pieces == [Delta(reasoning_content="thinking"), Delta(refusal="I can't")]
    assert not done


@pytest.mark.parametrize(
    "event",
    [
        _sse("response.failed", response={"status": "failed", "error": {"code": "server_error"}}),
        _sse("error", code="server_error", message="boom"),
        b"data: {not json\n\n",
        _sse("response.function_call_arguments.delta", item_id="fc_never_begun", delta="{}"),
    ],
)
def test_a_failure_mid_stream_is_an_upstream_error(event: bytes) -> None:
    with pytest.raises(UpstreamError):
        LineSplitter(ResponsesEvents().parse).feed(
            _sse("response.output_text.delta", delta="a") + event
        )


def test_a_chat_stream_still_ends_at_done() -> None:
    splitter = LineSplitter()
    chunk = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
    assert splitter.feed(chunk + b"data: [DONE]\n\n" + chunk) == ["hi"]
    assert splitter.done
    assert isinstance(FinalPieces([CHOICE_END]), list)
