"""The Responses API's events (``app.apis.responses.stream``), checked against the openai SDK's
own event types: what OpenAI's clients parse is what svc writes."""

from __future__ import annotations

import json
import typing
from typing import Any

import msgspec
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import BaseModel

from app.apis.responses import stream as stream_module
from app.apis.responses.request import parse_responses_request
from app.apis.responses.response import MessageItem, OutputTextPart, RefusalPart
from app.apis.responses.stream import ResponsesStream
from app.completion.catalog import default_catalog
from app.completion.output import StreamEnd
from app.upstream.base import Usage
from app.upstream.wire import Delta, ToolCallDelta, ToolCallFunctionDelta


def _event_models() -> dict[str, type[BaseModel]]:
    """The SDK's model of each event, by its ``type``."""
    union = typing.get_args(ResponseStreamEvent)[0]  # Annotated[Union[...], discriminator]
    models = {}
    for model in typing.get_args(union):
        (name,) = typing.get_args(model.model_fields["type"].annotation)
        models[name] = model
    return models


EVENT_MODELS = _event_models()


def _stream(**body: Any) -> ResponsesStream:
    request = {"model": "svc-fast", "input": "Hi", **body}
    params = parse_responses_request(
        json.dumps(request).encode(),
        default_catalog().aliases,
        max_messages=10,
        max_message_chars=1000,
        image_token_bound=100,
    )
    return ResponsesStream(
        created_at=1_767_225_600,
        model=params.chat.alias.id,
        requested=params.chat.requested,
        settings=params.settings,
    )


def _end(outcome: str = "completed", *, capped: bool = False) -> StreamEnd:
    return StreamEnd(
        outcome=outcome,  # type: ignore[arg-type]
        credits_used=7,
        balance=93,
        prompt_tokens=12,
        completion_tokens=3,
        reported=Usage(12, 3, {"cached_tokens": 4}, {"reasoning_tokens": 1}),
        capped=capped,
    )


def _events(raw: bytes) -> list[dict[str, Any]]:
    """Every event of ``raw``, checked: its event line names its type, the SDK's type
    accepts it, and the sequence numbers count up from 0."""
    events = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        event_line, data_line = block.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {data['type']}"
        EVENT_MODELS[data["type"]].model_validate(data)
        events.append(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def test_a_text_response_is_the_sequence_openai_sends() -> None:
    stream = _stream(instructions="Be brief.", metadata={"k": "v"})
    raw = stream.opening() + stream.piece("Hello") + stream.piece(" there")
    raw += stream.closing(None, tool_calls=False) + stream.ending(_end())
    events = _events(raw)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    item_id = events[2]["item"]["id"]
    assert item_id.startswith("msg_")
    assert all(e["item_id"] == item_id for e in events[3:8])
    assert events[6]["text"] == "Hello there"
    response = events[-1]["response"]
    assert response["id"].startswith("resp_svc_")
    assert response["id"] == events[0]["response"]["id"]
    assert (response["status"], response["model"], response["store"]) == (
        "completed",
        "svc-fast",
        False,
    )
    assert (response["instructions"], response["metadata"]) == ("Be brief.", {"k": "v"})
    assert response["output"][0]["content"][0]["text"] == "Hello there"
    assert response["usage"] == {
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": 15,
    }
    assert response["svc"] == {
        "requested_model": "svc-fast",
        "credits_used": 7,
        "balance_remaining": 93,
    }
    assert "svc" not in events[0]["response"]


def test_function_calls_are_items_of_their_own_with_svc_ids() -> None:
    stream = _stream()
    head = ToolCallDelta(
        index=0, id="call_upstream1", type="function", function=ToolCallFunctionDelta("f", "")
    )
    raw = stream.opening() + stream.piece("Let me look.")
    raw += stream.piece(Delta(tool_calls=[head]))
    raw += stream.piece(
        Delta(tool_calls=[ToolCallDelta(0, function=ToolCallFunctionDelta(arguments='{"a"'))])
    )
    second = ToolCallDelta(1, id="call_upstream2", function=ToolCallFunctionDelta("g", "{}"))
    raw += stream.piece(Delta(tool_calls=[second]))
    pending = Delta(tool_calls=[ToolCallDelta(0, function=ToolCallFunctionDelta(arguments=":1}"))])
    raw += stream.closing(pending, tool_calls=True) + stream.ending(_end())
    assert b"upstream" not in raw  # no upstream id reaches the client
    events = _events(raw)
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [item["type"] for item in done] == ["message", "function_call", "function_call"]
    assert [(d.get("name"), d.get("arguments")) for d in done[1:]] == [
        ("f", '{"a":1}'),
        ("g", "{}"),
    ]
    assert all(d["call_id"].startswith("call_") and d["id"].startswith("fc_") for d in done[1:])
    # the message ended when the first call began
    types = [e["type"] for e in events]
    assert types.index("response.output_item.done") < types.index(
        "response.function_call_arguments.delta"
    )
    final = events[-1]["response"]["output"]
    assert [item["type"] for item in final] == ["message", "function_call", "function_call"]


def test_a_refusal_is_a_part_of_the_message() -> None:
    stream = _stream()
    raw = stream.opening() + stream.piece(Delta(refusal="I can't"))
    raw += stream.closing(Delta(refusal=" help."), tool_calls=False) + stream.ending(_end())
    events = _events(raw)
    refusal_done = next(e for e in events if e["type"] == "response.refusal.done")
    assert refusal_done["refusal"] == "I can't help."


def test_output_cut_at_its_cap_is_incomplete() -> None:
    stream = _stream(max_output_tokens=16)
    raw = stream.opening() + stream.piece("a") + stream.closing(None, tool_calls=False)
    events = _events(raw + stream.ending(_end(capped=True)))
    assert events[-1]["type"] == "response.incomplete"
    response = events[-1]["response"]
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["max_output_tokens"] == 16


@pytest.mark.parametrize("outcome", ["upstream_error", "shutdown"])
def test_a_stream_that_fails_ends_its_open_items_and_fails_the_response(outcome: str) -> None:
    stream = _stream()
    raw = stream.opening() + stream.piece("partial") + stream.ending(_end(outcome))
    events = _events(raw)
    assert [e["type"] for e in events[-4:]] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.failed",
    ]
    assert events[-2]["item"]["status"] == "incomplete"
    response = events[-1]["response"]
    assert response["status"] == "failed"
    assert response["error"]["code"] == "server_error"
    assert response["svc"]["credits_used"] == 7  # charged for what was delivered


@pytest.mark.parametrize("after_ending", [False, True], ids=["heartbeat", "settlement"])
def test_a_stream_redis_failed_under_fails_without_metadata(after_ending: bool) -> None:
    """Unsettled: at a heartbeat (nothing closed yet) or at settlement (the ending written)."""
    stream = _stream()
    raw = stream.opening() + stream.piece("partial")
    if after_ending:
        stream.ending(_end())  # made, never sent: settlement failed
    events = _events(raw + stream.unsettled())
    if not after_ending:
        assert events[-2]["type"] == "response.output_item.done"
        assert events[-2]["item"]["status"] == "incomplete"
    failed = events[-1]
    assert failed["type"] == "response.failed"
    assert failed["response"]["error"]["code"] == "server_error"
    assert "charged at most once" in failed["response"]["error"]["message"]
    assert "svc" not in failed["response"]  # what it cost is not known


def test_reasoning_text_is_billed_but_not_shown() -> None:
    stream = _stream()
    assert stream.piece(Delta(reasoning_content="thinking")) == b""


def test_every_item_of_a_response_has_an_id_of_its_own() -> None:
    # text, then a call (the message item ends), then text again: a second message item
    stream = _stream()
    call = ToolCallDelta(
        index=0, id="c", type="function", function=ToolCallFunctionDelta(name="f", arguments="{}")
    )
    raw = stream.opening() + stream.piece("a") + stream.piece(Delta(tool_calls=[call]))
    raw += stream.piece("b") + stream.closing(None, tool_calls=True) + stream.ending(_end())
    output = _events(raw)[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["message", "function_call", "message"]
    ids = [item["id"] for item in output] + [
        output[1]["call_id"],
        _events(raw)[0]["response"]["id"],
    ]
    assert len(set(ids)) == len(ids) == 5
    assert [i.split("_")[0] for i in ids] == ["msg", "fc", "msg", "call", "resp"]


def test_the_templates_write_what_the_structs_would() -> None:
    text = msgspec.json.encode('a "quoted" é')
    part = OutputTextPart(text='a "quoted" é')
    refusal = RefusalPart(refusal="no")
    assert stream_module._TEXT_PART % text == msgspec.json.encode(part)
    assert msgspec.json.encode(refusal) == stream_module._REFUSAL_PART % b'"no"'
    item = MessageItem(id="msg_1", status="completed", content=[part, refusal])
    parts = stream_module._TEXT_PART % text + b"," + stream_module._REFUSAL_PART % b'"no"'
    assert stream_module._MESSAGE_ITEM % (b"msg_1", b"completed", parts) == msgspec.json.encode(
        item
    )
