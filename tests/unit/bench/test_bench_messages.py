"""The load generator on the Messages API (``POST /v1/messages``): its request, its reading of
Anthropic's events (content deltas counted, ``message_stop``'s credits, ``event: error``), and
the same-run ratio its target is measured by."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from app.apis.messages.stream import MessagesStream, error_event
from app.completion.output import StreamEnd
from app.upstream.base import Usage
from bench.loadgen import (
    MESSAGES_MAX_TOKENS,
    LoadConfig,
    MessagesChecker,
    StreamChecker,
    StreamShapeError,
    _body,
    _checker,
    _headers,
    _path,
)
from bench.measures import paired_ratio
from bench.sse import SSEParser

SVC = {"requested_model": "svc-fast", "credits_used": 5, "balance_remaining": 95}


def _event(data: dict[str, Any]) -> tuple[str, str]:
    """One event as the checker is given it: its data and its ``event:`` name."""
    return json.dumps(data), data["type"]


def _delta(text: str, index: int = 0) -> tuple[str, str]:
    return _event(
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "text_delta", "text": text},
        }
    )


START = _event(
    {
        "type": "message_start",
        "message": {
            "id": "msg_svc_0123",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "svc-fast",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        },
    }
)
PING = _event({"type": "ping"})
BLOCK = _event(
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
)
BLOCK_STOP = _event({"type": "content_block_stop", "index": 0})
MESSAGE_DELTA = _event(
    {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"input_tokens": 8, "output_tokens": 3},
    }
)
STOP = _event({"type": "message_stop", "svc": SVC})
GOOD = [START, PING, BLOCK, _delta("a"), _delta("b"), _delta("c"), BLOCK_STOP, MESSAGE_DELTA, STOP]


def _run(events: list[tuple[str, str]]) -> MessagesChecker:
    checker = MessagesChecker()
    for data, name in events:
        checker.event(data, name)
    return checker


def test_a_well_formed_stream_reports_its_credits_and_counts_its_text_deltas() -> None:
    checker = _run(GOOD)
    assert checker.finish() == 5
    assert checker.text_chunks == 3
    assert len(checker.gaps) == 2
    assert checker.first_content_at > 0
    assert checker.id == "msg_svc_0123"


def test_only_text_deltas_with_text_count_as_chunks() -> None:
    empty = _delta("")
    json_piece = _event(
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"a"'},
        }
    )
    tool = _event(
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_svc_1", "name": "f", "input": {}},
        }
    )
    tool_stop = _event({"type": "content_block_stop", "index": 1})
    checker = _run([*GOOD[:3], empty, _delta("a"), BLOCK_STOP, tool, json_piece, tool_stop])
    assert checker.text_chunks == 1


def test_the_sdk_events_need_no_event_name_and_no_ping() -> None:
    """What the ``openai`` client path feeds it: the SDK's re-encoded events (no ping)."""
    checker = MessagesChecker()
    for data, _name in [e for e in GOOD if e is not PING]:
        checker.event(data)
    assert checker.finish() == 5


def _error(svc: dict[str, Any] | None = None) -> tuple[str, str]:
    body: dict[str, Any] = {
        "type": "error",
        "error": {"type": "api_error", "message": "The upstream failed."},
    }
    if svc is not None:
        body["svc"] = svc
    return _event(body)


@pytest.mark.parametrize(
    ("events", "rule"),
    [
        ([*GOOD[:4], _error(SVC)], "error event: api_error"),
        ([START, _error()], "error event: api_error"),
        (GOOD[:-1], "before message_stop"),
        (GOOD[1:], "first event is not message_start"),
        ([_event({**json.loads(START[0]), "message": {"id": "msg_up_1"}}), *GOOD[1:]], "msg_svc_"),
        ([(START[0], "message_delta"), *GOOD[1:]], "event name"),
        ([*GOOD, PING], "after message_stop"),
        ([START, _delta("a"), *GOOD[2:]], "outside its open block"),
        ([*GOOD[:4], _delta("b", index=1), *GOOD[5:]], "outside its open block"),
        ([*GOOD[:3], BLOCK, *GOOD[3:]], "started out of order"),
        ([*GOOD[:6], MESSAGE_DELTA, BLOCK_STOP, STOP], "block open"),
        ([*GOOD[:7], STOP], "before message_delta"),
        ([*GOOD[:7], MESSAGE_DELTA, MESSAGE_DELTA, STOP], "twice"),
        (
            [*GOOD[:7], _event({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}})],
            "not end_turn",
        ),
        ([*GOOD[:-1], _event({"type": "message_stop", "svc": {"credits_used": 5}})], "three svc"),
        ([*GOOD[:-1], _event({"type": "message_stop"})], "three svc"),
        ([START, _event({"type": "message_end"})], "unexpected event message_end"),
    ],
)
def test_a_stream_breaking_a_rule_is_refused(events: list[tuple[str, str]], rule: str) -> None:
    with pytest.raises(StreamShapeError, match=rule):
        _run(events).finish()


def _svc_stream(end: StreamEnd | None = None) -> bytes:
    """A message as svc's own writer (``app.apis.messages.stream``) writes it."""
    stream = MessagesStream(model="svc-fast", requested="svc-fast")
    raw = stream.opening()
    for piece in ("Hel", "lo", " there"):
        raw += stream.piece(piece)
    raw += stream.closing("!", tool_calls=False)
    return raw + stream.ending(
        end
        or StreamEnd(
            outcome="completed",
            credits_used=7,
            balance=93,
            prompt_tokens=12,
            completion_tokens=4,
            reported=Usage(12, 4, {}),
            capped=False,
        )
    )


@pytest.mark.parametrize("cut", [1, 7, 64, 10_000])
def test_svcs_own_stream_read_in_pieces(cut: int) -> None:
    """The bytes svc writes, read as the aiohttp client reads them (in pieces, through the
    bench's SSE parser, each event with its name)."""
    raw = _svc_stream()
    checker, parser = MessagesChecker(), SSEParser()
    for at in range(0, len(raw), cut):
        for event in parser.feed(raw[at : at + cut]):
            checker.event(*event)
    assert parser.leftover == b""
    assert checker.finish() == 7
    assert checker.text_chunks == 4


def test_svcs_error_event_fails_the_stream() -> None:
    stream = MessagesStream(model="svc-fast", requested="svc-fast")
    raw = stream.opening() + stream.piece("Hel") + error_event("api_error", "The upstream failed.")
    events = SSEParser().feed(raw)
    assert [e.event for e in events][-1] == "error"
    checker = MessagesChecker()
    for event in events[:-1]:
        checker.event(*event)
    with pytest.raises(StreamShapeError, match="error event: api_error"):
        checker.event(*events[-1])


def test_the_request_is_anthropics() -> None:
    cfg = LoadConfig(base_url="http://127.0.0.1:1/v1", model="svc-fast", api="messages")
    assert _path(cfg) == "/messages"
    assert _body(cfg) == {
        "model": "svc-fast",
        "max_tokens": MESSAGES_MAX_TOKENS,
        "messages": [{"role": "user", "content": "Write one short sentence about load testing."}],
        "stream": True,
    }
    assert _body(msgspec.structs.replace(cfg, max_tokens=64))["max_tokens"] == 64
    headers = _headers(msgspec.structs.replace(cfg, api_key="svc_test_k"))
    assert headers["x-api-key"] == "svc_test_k"
    assert "authorization" not in headers
    assert isinstance(_checker(cfg), MessagesChecker)


def test_chat_requests_keep_their_bearer_key_and_checker() -> None:
    cfg = LoadConfig(base_url="http://127.0.0.1:1/v1", model="svc-fast", api_key="svc_test_k")
    assert _path(cfg) == "/chat/completions"
    assert _headers(cfg)["authorization"] == "Bearer svc_test_k"
    assert "x-api-key" not in _headers(cfg)
    assert type(_checker(cfg)) is StreamChecker


def test_the_paired_ratio_is_the_median_of_each_pairs_ratio() -> None:
    # (chat req/s, messages req/s) of three alternating pairs: 0.9, 0.95, 0.8
    assert paired_ratio([(2000.0, 1800.0), (2000.0, 1900.0), (2500.0, 2000.0)]) == (
        pytest.approx(0.9),
        3,
    )
    assert paired_ratio([(2000.0, 1700.0)]) == (pytest.approx(0.85), 1)
    # a chat point that served nothing counts for none
    assert paired_ratio([(0.0, 100.0), (1000.0, 950.0)]) == (pytest.approx(0.95), 1)
    assert paired_ratio([(0.0, 100.0)]) is None
    assert paired_ratio([]) is None
