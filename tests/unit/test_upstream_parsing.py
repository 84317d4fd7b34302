"""Reading an upstream's SSE lines, and what of an upstream error may reach a client."""

from __future__ import annotations

import pytest

from app.upstream.base import ChatMessage, UpstreamCall, UpstreamError, Usage
from app.upstream.openai_compat import request_body, sanitize
from app.upstream.sse import DONE, parse_data_line


def test_lines() -> None:
    assert parse_data_line(b'data: {"choices":[{"delta":{"content":"hi"}}]}\n') == "hi"
    assert (
        parse_data_line(b'data:{"choices":[{"delta":{"role":"assistant","content":""}}]}') is None
    )
    assert parse_data_line(b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}') is None
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}'
    assert parse_data_line(usage) == Usage(3, 9)
    assert parse_data_line(b"data: [DONE]") is DONE
    assert parse_data_line(b": keep-alive") is None
    assert parse_data_line(b"\n") is None
    with pytest.raises(UpstreamError):
        parse_data_line(b'data: {"error":{"message":"boom"}}')
    with pytest.raises(UpstreamError):
        parse_data_line(b"data: {not json")


def test_request_body_always_streams_with_usage() -> None:
    call = UpstreamCall(
        model="real-model",
        messages=[ChatMessage("user", "hi")],
        max_tokens=7,
        temperature=0.2,
        top_p=0.5,
    )
    assert request_body(call) == (
        b'{"model":"real-model","messages":[{"role":"user","content":"hi"}],"max_tokens":7,'
        b'"temperature":0.2,"top_p":0.5,"stream":true,"stream_options":{"include_usage":true}}'
    )


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
