"""The Messages API's events (``app.apis.messages.stream``): Anthropic's sequence, checked event
by event against svc's event types and the anthropic SDK's own, and read whole by the SDK's
stream accumulator (what Anthropic's clients build from it is what svc meant)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from app.apis.messages import stream as stream_module
from app.apis.messages.stream import MessagesStream, billed_usage, stop_reason
from app.apis.messages.wire import (
    ContentBlockDelta,
    ContentBlockStart,
    ContentBlockStop,
    InputJsonDelta,
    Ping,
    StreamEvent,
    TextContent,
    TextDelta,
    ToolUseContent,
)
from app.completion.output import (
    BALANCE_MARK,
    CREDITS_MARK,
    UNSETTLED,
    StreamEnd,
    ending_parts,
    settled_ending,
)
from app.upstream.base import StartUsage, Usage
from app.upstream.wire import Delta, ToolCallDelta, ToolCallFunctionDelta

_decode_event = msgspec.json.Decoder(StreamEvent).decode


def _stream() -> MessagesStream:
    return MessagesStream(model="svc-fast", requested="svc-auto")


def _end(
    outcome: str = "completed",
    *,
    capped: bool = False,
    reported: Usage | None = None,
    marked: bool = False,
    finish_reason: str | None = None,
    stop_sequence: str | None = None,
) -> StreamEnd:
    return StreamEnd(
        outcome=outcome,  # type: ignore[arg-type]
        credits_used=CREDITS_MARK if marked else 7,
        balance=BALANCE_MARK if marked else 93,
        prompt_tokens=12,
        completion_tokens=3,
        reported=reported if reported is not None else Usage(12, 3, {"cached_tokens": 4}),
        capped=capped,
        finish_reason=finish_reason,
        stop_sequence=stop_sequence,
    )


def _events(raw: bytes) -> list[dict[str, Any]]:
    """Every event of ``raw``, checked: written as Anthropic writes them (an event line
    naming the type, a data line, a blank line), of a type svc declares, and, when the SDK
    is there, one its types accept."""
    assert raw.endswith(b"\n\n")
    events = []
    for block in raw.decode().split("\n\n")[:-1]:
        event_line, data_line = block.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {data['type']}"
        _decode_event(data_line.removeprefix("data: ").encode())
        _sdk_check(data)
        events.append(data)
    return events


def _sdk_check(data: dict[str, Any]) -> None:
    try:
        from anthropic.types import RawMessageStreamEvent
        from pydantic import TypeAdapter
    except ImportError:
        return
    if data["type"] in ("ping", "error"):
        return  # the SDK's streams skip pings and raise errors: no event type of their own
    TypeAdapter(RawMessageStreamEvent).validate_python(data)


def _sdk_final(raw: bytes) -> Any:
    """The message the anthropic SDK's stream helper builds of ``raw``."""
    anthropic = pytest.importorskip("anthropic")
    httpx2 = pytest.importorskip("httpx2")

    def answer(request: Any) -> Any:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=raw)

    client = anthropic.Anthropic(
        api_key="svc_test_x",
        base_url="http://svc.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
        max_retries=0,
    )
    with client.messages.stream(
        model="svc-auto", max_tokens=64, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        return stream.get_final_message()


def _text_stream(end: StreamEnd | None = None) -> bytes:
    stream = _stream()
    raw = stream.opening() + stream.piece("Hello") + stream.piece(Delta(content=" there"))
    raw += stream.closing("!", tool_calls=False)
    return raw + stream.ending(end or _end())


def test_a_text_message_is_the_sequence_anthropic_sends() -> None:
    events = _events(_text_stream())
    assert [e["type"] for e in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    message = events[0]["message"]
    assert message["id"].startswith("msg_svc_")
    assert len(message["id"]) == len("msg_svc_") + 24
    assert (message["model"], message["role"], message["content"]) == ("svc-fast", "assistant", [])
    assert message["stop_reason"] is None
    assert message["usage"]["input_tokens"] == message["usage"]["output_tokens"] == 0
    assert events[2] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    assert [e["delta"] for e in events[3:6]] == [
        {"type": "text_delta", "text": t} for t in ("Hello", " there", "!")
    ]
    assert events[6] == {"type": "content_block_stop", "index": 0}
    assert events[7]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert events[7]["usage"] == {
        "input_tokens": 8,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4,
        "output_tokens": 3,
    }
    assert events[8]["svc"] == {
        "requested_model": "svc-auto",
        "credits_used": 7,
        "balance_remaining": 93,
    }


def test_the_sdk_reads_a_text_message_whole() -> None:
    message = _sdk_final(_text_stream())
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Hello there!"
    assert message.id.startswith("msg_svc_")
    assert (message.model, message.stop_reason, message.stop_sequence) == (
        "svc-fast",
        "end_turn",
        None,
    )
    # message_delta's counts replace message_start's zeros
    usage = message.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.output_tokens) == (8, 4, 3)
    assert usage.cache_creation_input_tokens == 0


def _tool_stream() -> bytes:
    stream = _stream()
    raw = stream.opening() + stream.piece("Let me look.")
    head = ToolCallDelta(
        index=0, id="call_upstream1", type="function", function=ToolCallFunctionDelta("f", "")
    )
    raw += stream.piece(Delta(tool_calls=[head]))
    raw += stream.piece(
        Delta(tool_calls=[ToolCallDelta(0, function=ToolCallFunctionDelta(arguments='{"a"'))])
    )
    second = ToolCallDelta(1, id="call_upstream2", function=ToolCallFunctionDelta("g", "{}"))
    raw += stream.piece(Delta(tool_calls=[second]))
    pending = Delta(tool_calls=[ToolCallDelta(1, function=ToolCallFunctionDelta(arguments=""))])
    raw += stream.closing(pending, tool_calls=True)
    raw += stream.piece(  # a late piece of the first call: still its block's
        Delta(tool_calls=[ToolCallDelta(0, function=ToolCallFunctionDelta(arguments=":1}"))])
    )
    return raw + stream.ending(_end())


def test_tool_calls_are_tool_use_blocks_with_svc_ids() -> None:
    raw = _tool_stream()
    assert b"upstream" not in raw  # no upstream id reaches the client
    events = _events(raw)
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert [(s["index"], s["content_block"]["type"]) for s in starts] == [
        (0, "text"),
        (1, "tool_use"),
        (2, "tool_use"),
    ]
    tool = starts[1]["content_block"]
    assert tool["id"].startswith("toolu_svc_")
    assert len(tool["id"]) == len("toolu_svc_") + 24
    assert (tool["name"], tool["input"]) == ("f", {})
    assert starts[2]["content_block"]["id"] != tool["id"]
    # each block is stopped before the next one starts
    order = [(e["type"], e.get("index")) for e in events if e["type"].startswith("content_block")]
    assert order.index(("content_block_stop", 0)) < order.index(("content_block_start", 1))
    assert order.index(("content_block_stop", 1)) < order.index(("content_block_start", 2))
    json_deltas = [
        (e["index"], e["delta"]["partial_json"])
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"
    ]
    assert json_deltas == [(1, '{"a"'), (2, "{}"), (1, ":1}")]
    assert events[-2]["delta"]["stop_reason"] == "tool_use"


def test_the_sdk_reads_a_tool_use_message_whole() -> None:
    message = _sdk_final(_tool_stream())
    assert [block.type for block in message.content] == ["text", "tool_use", "tool_use"]
    assert message.content[0].text == "Let me look."
    assert [(b.name, b.input) for b in message.content[1:]] == [("f", {"a": 1}), ("g", {})]
    assert all(b.id.startswith("toolu_svc_") for b in message.content[1:])
    assert message.stop_reason == "tool_use"


def test_a_refusal_is_text_and_reasoning_is_not_shown() -> None:
    stream = _stream()
    assert stream.piece(Delta(reasoning_content="thinking")) == b""
    assert stream.piece(Delta(reasoning="more")) == b""
    raw = stream.opening() + stream.piece(Delta(refusal="I can't help."))
    events = _events(raw + stream.closing(None, tool_calls=False) + stream.ending(_end()))
    assert [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"] == [
        "I can't help."
    ]


def test_an_empty_message_has_no_blocks() -> None:
    stream = _stream()
    raw = stream.opening() + stream.closing(None, tool_calls=False) + stream.ending(_end())
    assert [e["type"] for e in _events(raw)] == [
        "message_start",
        "ping",
        "message_delta",
        "message_stop",
    ]


# -- stop_reason ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capped", "tool_calls", "finish", "sequence", "expected"),
    [
        (False, False, None, None, ("end_turn", None)),
        (False, False, "stop", None, ("end_turn", None)),
        (True, False, None, None, ("max_tokens", None)),
        (False, False, "length", None, ("max_tokens", None)),
        (True, True, "tool_calls", None, ("max_tokens", None)),  # cut inside a call
        (False, True, None, None, ("tool_use", None)),
        (False, False, "tool_calls", None, ("tool_use", None)),
        (False, False, "content_filter", None, ("refusal", None)),
        (False, False, "stop", "END", ("stop_sequence", "END")),
    ],
)
def test_stop_reason(
    capped: bool,
    tool_calls: bool,
    finish: str | None,
    sequence: str | None,
    expected: tuple[str, str | None],
) -> None:
    assert (
        stop_reason(capped=capped, tool_calls=tool_calls, finish=finish, stop_sequence=sequence)
        == expected
    )


def test_output_cut_at_its_cap_stops_for_max_tokens() -> None:
    events = _events(_text_stream(_end(capped=True)))
    assert events[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert _sdk_final(_text_stream(_end(capped=True))).stop_reason == "max_tokens"


def test_what_the_relay_learned_of_the_upstreams_finish_decides_the_rest() -> None:
    stream = _stream()
    raw = stream.opening() + stream.piece("a") + stream.closing(None, tool_calls=False)
    events = _events(raw + stream.ending(_end(stop_sequence="###")))
    assert events[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "###"}
    stream = _stream()
    raw = stream.opening() + stream.piece("a") + stream.closing(None, tool_calls=False)
    final = _sdk_final(raw + stream.ending(_end(stop_sequence="###")))
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "###")
    stream = _stream()
    raw = stream.opening() + stream.closing(None, tool_calls=False)
    raw += stream.ending(_end(finish_reason="content_filter"))
    assert _events(raw)[-2]["delta"]["stop_reason"] == "refusal"
    stream = _stream()  # a cut wins over a stop sequence the upstream named after it
    raw = stream.opening() + stream.piece("a") + stream.closing(None, tool_calls=False)
    raw += stream.ending(_end(capped=True, stop_sequence="###"))
    assert _events(raw)[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}


# -- usage ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("details", "expected"),
    [
        (None, (12, 0, 0)),
        ({"cached_tokens": 5}, (7, 0, 5)),
        ({"cached_tokens": 5, "cache_creation_input_tokens": 4}, (3, 4, 5)),
        ({"cache_write_tokens": 2}, (10, 2, 0)),
        ({"cached_tokens": 50}, (0, 0, 12)),  # clamped to the prompt billed
        ({"cached_tokens": 10, "cache_write_tokens": 9}, (0, 2, 10)),
        ({"cached_tokens": -3}, (12, 0, 0)),
    ],
)
def test_the_usage_is_the_billed_prompt_split_as_anthropic_splits_it(
    details: dict[str, int] | None, expected: tuple[int, int, int]
) -> None:
    usage = billed_usage(_end(reported=Usage(99, 3, details)))
    parts = (usage.input_tokens, usage.cache_creation_input_tokens, usage.cache_read_input_tokens)
    assert parts == expected
    assert sum(parts) == 12
    assert usage.output_tokens == 3


def test_an_unreported_stream_bills_svcs_own_counts() -> None:
    end = StreamEnd(
        outcome="completed",
        credits_used=1,
        balance=2,
        prompt_tokens=30,
        completion_tokens=4,
        reported=None,
        capped=False,
    )
    usage = billed_usage(end)
    assert (usage.input_tokens, usage.output_tokens) == (30, 4)


# -- endings --------------------------------------------------------------------------------


def test_the_ending_is_marked_once_for_settlement_and_replays() -> None:
    stream = _stream()
    stream.opening()
    ending = stream.ending(_end(marked=True))
    assert ending_parts(ending) is not None
    settled = settled_ending(ending, 11, 89)
    assert _events(settled)[-1]["svc"] == {
        "requested_model": "svc-auto",
        "credits_used": 11,
        "balance_remaining": 89,
    }


@pytest.mark.parametrize(
    ("outcome", "err_type"), [("upstream_error", "api_error"), ("shutdown", "overloaded_error")]
)
def test_a_stream_that_fails_ends_with_an_error_event(outcome: str, err_type: str) -> None:
    stream = _stream()
    raw = stream.opening() + stream.piece("partial")
    ending = stream.ending(_end(outcome, marked=True))
    assert ending_parts(ending) is not None  # settled: the charge is told
    events = _events(raw + settled_ending(ending, 7, 93))
    error = events[-1]
    assert error["type"] == "error"
    assert error["error"]["type"] == err_type
    assert "charged only for the content delivered" in error["error"]["message"]
    assert error["svc"]["credits_used"] == 7
    assert "message_stop" not in [e["type"] for e in events]


def test_the_sdk_raises_a_mid_stream_error() -> None:
    anthropic = pytest.importorskip("anthropic")
    stream = _stream()
    raw = stream.opening() + stream.piece("partial") + stream.ending(_end("upstream_error"))
    with pytest.raises(anthropic.APIStatusError) as info:
        _sdk_final(raw)
    body = info.value.body
    assert isinstance(body, dict)
    assert body["error"]["type"] == "api_error"
    assert body["svc"]["credits_used"] == 7


@pytest.mark.parametrize("after_ending", [False, True], ids=["heartbeat", "settlement"])
def test_a_stream_redis_failed_under_ends_with_an_error_without_metadata(
    after_ending: bool,
) -> None:
    stream = _stream()
    raw = stream.opening() + stream.piece("partial")
    if after_ending:
        raw += stream.closing(None, tool_calls=False)
        stream.ending(_end(marked=True))  # made, never sent: settlement failed
    unsettled = stream.unsettled()
    assert ending_parts(unsettled) is None
    error = _events(raw + unsettled)[-1]
    assert error == {"type": "error", "error": {"type": "api_error", "message": UNSETTLED}}


# -- the byte templates ---------------------------------------------------------------------


def _event(struct: Any) -> bytes:
    data = msgspec.json.encode(struct)
    name: str = json.loads(data)["type"]
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


def test_the_templates_write_what_the_event_structs_would() -> None:
    text = 'a "quoted" é\n'
    encoded = msgspec.json.encode(text)
    assert _event(Ping()) == stream_module.PING
    assert _event(ContentBlockStart(3, TextContent())) == stream_module._TEXT_START % 3
    assert _event(
        ContentBlockStart(4, ToolUseContent("toolu_svc_1", "f"))
    ) == stream_module._TOOL_START % (4, b'"toolu_svc_1"', b'"f"')
    assert stream_module._TEXT_HEAD % 2 + encoded + stream_module._DELTA_TAIL == _event(
        ContentBlockDelta(2, TextDelta(text))
    )
    assert stream_module._JSON_HEAD % 5 + encoded + stream_module._DELTA_TAIL == _event(
        ContentBlockDelta(5, InputJsonDelta(text))
    )
    assert _event(ContentBlockStop(6)) == stream_module._BLOCK_STOP % 6


def test_a_text_token_after_the_first_is_one_template_write() -> None:
    stream = _stream()
    stream.opening()
    stream.piece("first")
    assert stream.piece("next") == stream_module._TEXT_HEAD % 0 + b'"next"' + b"}}\n\n"


def test_message_start_carries_the_input_counts_a_provider_began_with() -> None:
    """The counts a Messages provider's own message_start gave (``StartUsage``: the prompt as
    Chat Completions counts it, cache reads and writes among its details) go on svc's
    message_start split as Anthropic's are; the output stays 0 (message_delta has it). The
    SDK's accumulator then ends with message_delta's counts, not the two added up."""
    stream = _stream()
    started = StartUsage(12, 1, {"cached_tokens": 4, "cache_creation_input_tokens": 3})
    raw = stream.opening(started) + stream.piece("Hi") + stream.closing(None, tool_calls=False)
    raw += stream.ending(_end(reported=Usage(12, 3, dict(started.prompt_tokens_details or {}))))
    events = _events(raw)
    assert events[0]["message"]["usage"] == {
        "input_tokens": 5,
        "cache_creation_input_tokens": 3,
        "cache_read_input_tokens": 4,
        "output_tokens": 0,
    }
    final = _sdk_final(raw).usage
    assert (final.input_tokens, final.cache_read_input_tokens) == (5, 4)
    assert (final.cache_creation_input_tokens, final.output_tokens) == (3, 3)


def test_message_start_counts_nothing_without_a_providers_counts() -> None:
    """A chat upstream reports at the end: message_start's usage is all 0, never svc's
    estimate of the prompt."""
    (start, *_rest) = _events(_stream().opening() + _stream().opening(None))
    assert set(start["message"]["usage"].values()) == {0}
