"""The load generator's stream checks: a stream that breaks a wire rule is an error."""

from __future__ import annotations

import json

import pytest

from bench.loadgen import ResponsesChecker, StreamChecker, StreamShapeError, _percentiles
from bench.measures import cpu_us_per_chunk, rss_at_streams, rss_kb_per_stream


def _chunk(
    content: str | None, *, first: bool = False, finish: str | None = None, **kw: object
) -> str:
    delta: dict[str, object] = {}
    if first:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    body = {
        "id": kw.get("id", "chatcmpl-svc-7"),
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "svc-fast",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return json.dumps(body)


META = json.dumps(
    {
        "id": "chatcmpl-svc-7",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "svc-fast",
        "choices": [],
        "svc": {"requested_model": "svc-fast", "credits_used": 3, "balance_remaining": 9},
    }
)
GOOD = [_chunk("a", first=True), _chunk("b"), _chunk("c", finish="stop"), META, "[DONE]"]


def _run(events: list[str], svc: bool = True) -> int:
    checker = StreamChecker(svc)
    for data in events:
        checker.event(data)
    return checker.finish()


def test_a_well_formed_svc_stream_reports_its_credits() -> None:
    assert _run(GOOD) == 3


@pytest.mark.parametrize(
    ("events", "rule"),
    [
        (GOOD[:-1], "without \\[DONE\\]"),
        ([*GOOD[:3], "[DONE]"], "no metadata chunk"),
        ([_chunk("a", first=True), _chunk("b", id="chatcmpl-svc-8"), *GOOD[2:]], "id changed"),
        ([_chunk("a"), *GOOD[1:]], "role"),
        ([GOOD[0], _chunk("b", first=True), *GOOD[2:]], "role"),
        ([GOOD[0], GOOD[1], _chunk("c"), META, "[DONE]"], "finish_reason stop"),
        ([GOOD[0], _chunk("b", finish="stop"), GOOD[2], META, "[DONE]"], "after finish_reason"),
        (
            [
                *GOOD[:3],
                META.replace('"choices": []', '"choices": [], "x": 1').replace(
                    '"balance_remaining": 9', '"balance_remaining": 9, "extra": 1'
                ),
                "[DONE]",
            ],
            "three svc fields",
        ),
        ([*GOOD[:4], META, "[DONE]"], "after the metadata"),
        ([*GOOD, "[DONE]"], "after \\[DONE\\]"),
        ([GOOD[0], json.dumps({"error": {"code": "upstream_unavailable"}}), "[DONE]"], "error"),
        (["[DONE]"], "no metadata chunk"),
    ],
)
def test_a_stream_breaking_a_rule_is_refused(events: list[str], rule: str) -> None:
    with pytest.raises(StreamShapeError, match=rule):
        _run(events)


def test_direct_streams_need_content_and_done() -> None:
    usage = json.dumps({"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": {}})
    assert _run([_chunk("a", first=True, id="up-1"), usage, "[DONE]"], svc=False) == 0
    with pytest.raises(StreamShapeError, match="no content"):
        _run([usage, "[DONE]"], svc=False)


def test_percentiles() -> None:
    assert _percentiles([]).p50 == 0.0
    assert _percentiles([5.0]).p99 == 5.0
    values = [float(v) for v in range(1, 101)]
    p = _percentiles(values)
    assert (p.p50, p.p90, p.p99) == (50.5, 90.1, 99.01)


def test_inter_chunk_gaps_are_between_consecutive_chunks_with_content() -> None:
    checker = StreamChecker(svc=False)
    for at in (10.0, 10.010, 10.025, 10.026):
        checker.text(at)
    assert checker.text_chunks == 4
    assert checker.first_content_at == 10.0
    assert [round(g, 6) for g in checker.gaps] == [10.0, 15.0, 1.0]


def test_only_chunks_with_content_count_and_start_the_ttfb() -> None:
    role = _chunk("", first=True, id="up-1")  # the upstream's role chunk: no content yet
    checker = StreamChecker(svc=False)
    checker.event(role)
    assert (checker.text_chunks, checker.first_content_at, checker.gaps) == (0, 0.0, [])
    checker.event(_chunk("a", id="up-1"))
    checker.event(_chunk("b", id="up-1"))
    checker.event("[DONE]")
    assert checker.finish() == 0
    assert checker.text_chunks == 2
    assert len(checker.gaps) == 1
    assert checker.first_content_at > 0


def test_svc_streams_count_their_content_chunks_too() -> None:
    checker = StreamChecker(svc=True)
    for data in GOOD:
        checker.event(data)
    assert checker.finish() == 3
    assert checker.text_chunks == 3
    assert len(checker.gaps) == 2


def test_cpu_per_relayed_chunk() -> None:
    # 1.2 s of server CPU over 30,000 relayed chunks is 40 µs a chunk
    assert cpu_us_per_chunk(1.2, 30_000) == 40.0
    assert cpu_us_per_chunk(0.5, 0) is None


def test_rss_per_open_stream() -> None:
    mb = 2**20
    assert rss_kb_per_stream(100 * mb, 150 * mb, 1000) == 51.2
    assert rss_kb_per_stream(100 * mb, 100 * mb, 10) == 0.0
    assert rss_kb_per_stream(100 * mb, 150 * mb, 0) is None


def _response_events(svc: dict[str, int] | None = None) -> list[str]:
    response = {"id": "resp_svc_1", "status": "in_progress"}
    final = {**response, "status": "completed", "svc": svc or {}}
    events = [
        {"type": "response.created", "response": response},
        {"type": "response.output_text.delta", "delta": "a"},
        {"type": "response.output_text.delta", "delta": "b"},
        {"type": "response.completed", "response": final},
    ]
    return [json.dumps({**e, "sequence_number": n}) for n, e in enumerate(events)]


SVC_META = {"requested_model": 1, "credits_used": 3, "balance_remaining": 9}


def test_a_responses_stream_is_checked_and_its_credits_read() -> None:
    checker = ResponsesChecker()
    for event in _response_events(SVC_META):
        checker.event(event)
    assert checker.finish() == 3
    assert checker.text_chunks == 2


@pytest.mark.parametrize(
    ("events", "rule"),
    [
        (_response_events(SVC_META)[1:], "sequence_number"),
        (_response_events({"credits_used": 3}), "three svc fields"),
        (_response_events(SVC_META)[:3], "before the response completed"),
        (
            [
                *_response_events(SVC_META)[:1],
                json.dumps(
                    {
                        "type": "response.failed",
                        "sequence_number": 1,
                        "response": {"id": "resp_svc_1"},
                    }
                ),
            ],
            "response.failed",
        ),
    ],
)
def test_a_responses_stream_that_breaks_a_rule_is_an_error(events: list[str], rule: str) -> None:
    def check() -> int:
        checker = ResponsesChecker()
        for event in events:
            checker.event(event)
        return checker.finish()

    with pytest.raises(StreamShapeError, match=rule):
        check()


def test_a_workers_rss_is_scaled_to_the_streams_it_should_hold() -> None:
    # 66 MB idle, 126 MB holding 1,400 streams: 60 MB for 1,400, so 1,000 would be 108 MB
    assert rss_at_streams(66.0, 126.0, 1_400, 1_000) == pytest.approx(108.857, abs=0.001)
    assert rss_at_streams(66.0, 108.0, 1_000, 1_000) == 108.0
