"""The load generator's SSE parser: the same events however the bytes are cut."""

from __future__ import annotations

import pytest

from bench.sse import SSEEvent, SSEParser, parse_sse

STREAM = (
    b'event: response.created\ndata: {"a":1}\n\n'
    b": a comment\n\n"
    b'data: {"b":2}\n\n'
    b"data:no space\nid: 7\nretry: 10\n\n"
    b"data: first\ndata: second\n\n"
    b"event: named-only\n\n"
    b"data: \xc3\xa9t\xc3\xa9\n\n"
    b"\n\n"
    b"data: [DONE]\n\n"
)
EVENTS = [
    SSEEvent('{"a":1}', "response.created"),
    SSEEvent('{"b":2}'),
    SSEEvent("no space"),
    SSEEvent("first\nsecond"),
    SSEEvent("", "named-only"),
    SSEEvent("été"),
    SSEEvent("[DONE]"),
]


def test_a_whole_body() -> None:
    assert parse_sse(STREAM) == EVENTS


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
def test_cut_at_every_byte(newline: bytes) -> None:
    body = STREAM.replace(b"\n", newline)
    for cut in range(len(body) + 1):
        parser = SSEParser()
        assert parser.feed(body[:cut]) + parser.feed(body[cut:]) == EVENTS, cut
        assert parser.leftover == b""


def test_one_byte_at_a_time() -> None:
    parser = SSEParser()
    events = []
    for i in range(len(STREAM)):
        events += parser.feed(STREAM[i : i + 1])
    assert events == EVENTS


def test_an_unfinished_event_is_left_over() -> None:
    parser = SSEParser()
    assert parser.feed(b'data: {"a":1}\n\ndata: {"b"') == [SSEEvent('{"a":1}')]
    assert parser.leftover == b'data: {"b"'
    parser = SSEParser()
    parser.feed(b"data: x\n")  # no blank line yet
    assert parser.leftover
    parser = SSEParser()
    parser.feed(b"data: x\n\n\n")  # a blank line too many ends nothing
    assert parser.leftover == b""


def test_a_lone_cr_is_not_a_line_end() -> None:
    assert parse_sse(b"data: a\rb\n\n") == [SSEEvent("a\rb")]
