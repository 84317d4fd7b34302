"""Reading an upstream's SSE lines, and what of an upstream error may reach a client."""

from __future__ import annotations

import msgspec
import pytest

from app.core.errors import UpstreamError
from app.upstream.base import CHOICE_END, ChoiceEnd, UpstreamCall, Usage
from app.upstream.openai_http import request_body, sanitize
from app.upstream.sse import DONE, parse_data_line
from app.upstream.wire import ChatRequest, Delta, ToolCallDelta, ToolCallFunctionDelta


def test_lines() -> None:
    assert parse_data_line(b'data: {"choices":[{"delta":{"content":"hi"}}]}\n') == ["hi"]
    assert (
        parse_data_line(b'data:{"choices":[{"delta":{"role":"assistant","content":""}}]}') is None
    )
    finish = b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}'
    assert parse_data_line(finish) == [CHOICE_END]
    last = b'data: {"choices":[{"delta":{"content":"!"},"finish_reason":"length"}]}'
    assert parse_data_line(last) == [Delta(content="!", finish_reason="length"), CHOICE_END]
    stop = b'data: {"choices":[{"delta":{"content":"!"},"finish_reason":"stop"}]}'
    assert parse_data_line(stop) == ["!", CHOICE_END]
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}'
    assert parse_data_line(usage) == [Usage(3, 9)]
    assert parse_data_line(b"data: [DONE]") is DONE
    assert parse_data_line(b": keep-alive") is None
    assert parse_data_line(b"\n") is None
    with pytest.raises(UpstreamError):
        parse_data_line(b'data: {"error":{"message":"boom"}}')
    with pytest.raises(UpstreamError):
        parse_data_line(b"data: {not json")


@pytest.mark.parametrize(
    ("choice", "end"),
    [
        # vLLM: stop_reason on every choice, null but on the finish chunk's
        ('"delta":{"content":"!"},"finish_reason":null,"stop_reason":null', None),
        ('"delta":{"content":"!"},"finish_reason":"stop","stop_reason":"END"', ChoiceEnd("END")),
        ('"delta":{},"finish_reason":"stop","stop_reason":128009', CHOICE_END),  # a token id
        ('"delta":{},"finish_reason":"stop","stop_reason":null', CHOICE_END),  # its EOS
        # SGLang
        ('"delta":{},"finish_reason":"stop","matched_stop":"\\n\\n"', ChoiceEnd("\n\n")),
        ('"delta":{},"finish_reason":"stop","matched_stop":2', CHOICE_END),
        # what another server might put there is no failure
        ('"delta":{},"finish_reason":"stop","stop_reason":{"a":[1]}', CHOICE_END),
        ('"delta":{},"finish_reason":"stop","stop_reason":""', CHOICE_END),
    ],
)
def test_the_stop_an_upstream_says_it_matched_is_on_the_choices_end(
    choice: str, end: ChoiceEnd | None
) -> None:
    pieces = parse_data_line(b'data: {"choices":[{"index":0,%s}]}' % choice.encode())
    assert isinstance(pieces, list)
    text = ["!"] if '"content":"!"' in choice else []
    assert pieces == ([*text, end] if end is not None else text)


def test_a_stop_named_on_another_finish_is_no_stop_sequence() -> None:
    line = b'data: {"choices":[{"delta":{},"finish_reason":"length","stop_reason":"END"}]}'
    assert parse_data_line(line) == [Delta(finish_reason="length"), CHOICE_END]


def _call(body: dict[str, object], max_tokens: int = 7) -> UpstreamCall:
    request = msgspec.convert(body, ChatRequest)
    return UpstreamCall(model="real-model", request=request, max_tokens=max_tokens)


def test_request_body_always_streams_with_usage() -> None:
    body = {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}
    sent = msgspec.json.decode(request_body(_call({**body, "temperature": 0.2, "top_p": 0.5})))
    assert sent == {
        "model": "real-model",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.2,
        "top_p": 0.5,
        "max_tokens": 7,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_request_body_forwards_every_field_the_client_sent() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = {
        "model": "svc-fast",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "see"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ],
        "tools": tools,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "response_format": {"type": "json_object"},
        "stop": ["\n"],
        "seed": 7,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "logit_bias": {"50256": -100},
        "logprobs": True,
        "top_logprobs": 2,
        "user": "u1",
        "reasoning_effort": "low",
        "max_completion_tokens": 99,
        "n": 1,
        "stream_options": {"include_usage": False},
        "unknown_field": "ignored",
    }
    sent = msgspec.json.decode(request_body(_call(body, max_tokens=50)))
    for field in (
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "user",
        "reasoning_effort",
    ):
        assert sent[field] == body[field], field
    assert sent["model"] == "real-model"
    assert sent["max_completion_tokens"] == 50  # the cap, under the name the client used
    assert "max_tokens" not in sent
    assert "n" not in sent
    assert "unknown_field" not in sent
    assert sent["stream_options"] == {"include_usage": True}


def test_deltas_beyond_text_are_parsed() -> None:
    call = (
        b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1",'
        b'"type":"function","function":{"name":"f","arguments":""}}]}}]}'
    )
    assert parse_data_line(call) == [
        Delta(
            tool_calls=[
                ToolCallDelta(
                    index=0,
                    id="call_1",
                    type="function",
                    function=ToolCallFunctionDelta(name="f", arguments=""),
                )
            ]
        )
    ]
    finish = b'data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}'
    assert parse_data_line(finish) == [Delta(finish_reason="tool_calls"), CHOICE_END]
    refusal = b'data: {"choices":[{"delta":{"refusal":"no"}}]}'
    assert parse_data_line(refusal) == [Delta(refusal="no")]
    reasoning = b'data: {"choices":[{"delta":{"reasoning_content":"hmm"}}]}'
    assert parse_data_line(reasoning) == [Delta(reasoning_content="hmm")]
    logprobs = b'data: {"choices":[{"delta":{"content":"a"},"logprobs":{"content":[]}}]}'
    [piece] = parse_data_line(logprobs)  # type: ignore[misc]
    assert isinstance(piece, Delta)
    assert (piece.content, bytes(piece.logprobs)) == ("a", b'{"content":[]}')  # type: ignore[arg-type]
    with_usage = (
        b'data: {"choices":[{"delta":{"content":"z"}}],"usage":{"prompt_tokens":1,'
        b'"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1,"x":null},'
        b'"completion_tokens_details":{"reasoning_tokens":2,"nested":{"a":1}}}}'
    )
    assert parse_data_line(with_usage) == [
        "z",
        Usage(1, 2, {"cached_tokens": 1}, {"reasoning_tokens": 2}),
    ]


def test_sanitize_hides_model_and_urls() -> None:
    text = sanitize("Model Llama-3-70B at https://api.example.com/v1 is overloaded", "llama-3-70b")
    assert "llama" not in text.lower()
    assert "example.com" not in text
    assert sanitize("", "m") == "The request was rejected as invalid."
    assert len(sanitize("x" * 1000, "m")) == 300


def test_line_splitter_joins_reads_and_stops_at_done() -> None:
    from app.upstream.sse import LineSplitter

    splitter = LineSplitter()
    stream = (
        b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\r\n\r\n'
        b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
        b'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n'
        b": keep-alive\n\n"
        b'data: {"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":2}}\n\n'
        b"data: [DONE]\n\n"
        b'data: {"choices":[{"delta":{"content":"late"}}]}\n\n'
    )
    pieces = []
    for i in range(0, len(stream), 7):  # reads of any size, split mid-line
        pieces += splitter.feed(stream[i : i + 7])
        if splitter.done:
            break
    assert pieces == ["Hel", "lo", Usage(2, 2)]
    assert splitter.done


def test_line_splitter_groups_what_arrived_together() -> None:
    from app.upstream.sse import LineSplitter

    splitter = LineSplitter()
    one = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    assert splitter.feed(one * 3) == ["a", "a", "a"]
    assert splitter.feed(one[:10]) == []
    assert splitter.feed(one[10:]) == ["a"]
    assert not splitter.done
