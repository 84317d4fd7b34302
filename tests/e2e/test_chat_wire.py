"""The exact wire format of a completion stream, checked line by line over raw HTTP."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e


def _stream(server: Server, key: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def test_every_wire_rule(server: Server) -> None:
    pid = server.new_account(100_000)
    key = server.new_key(pid)
    before = server.balance(pid)
    r = _stream(
        server, key, {"model": "svc-fast", "messages": [{"role": "user", "content": "hello"}]}
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    raw = r.text
    assert raw.endswith("data: [DONE]\n\n")
    events = raw.split("\n\n")
    assert events[-1] == ""
    lines = events[:-1]
    assert all(e.startswith("data: ") and "\n" not in e for e in lines)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(e[len("data: ") :]) for e in lines[:-1]]
    content, meta = chunks[:-1], chunks[-1]
    assert len(content) >= 1
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1
    assert re.fullmatch(r"chatcmpl-svc-\d+", ids.pop())
    for i, c in enumerate(content):
        assert set(c) == {"id", "object", "created", "model", "choices"}
        assert c["object"] == "chat.completion.chunk"
        assert c["model"] == "svc-fast"
        assert isinstance(c["created"], int)
        (choice,) = c["choices"]
        assert choice["index"] == 0
        assert isinstance(choice["delta"]["content"], str)
        assert ("role" in choice["delta"]) == (i == 0)
        if i == 0:
            assert choice["delta"]["role"] == "assistant"
        last = i == len(content) - 1
        assert choice["finish_reason"] == ("stop" if last else None)
    # usage on the last chunk whether asked for or not (issue 46), as OpenRouter does
    assert set(meta) == {"id", "object", "created", "model", "choices", "svc", "usage"}
    assert {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(meta["usage"])
    assert meta["choices"] == []
    assert set(meta["svc"]) == {"requested_model", "credits_used", "balance_remaining"}
    assert meta["svc"]["requested_model"] == "svc-fast"
    after = server.balance(pid)
    assert before - after == meta["svc"]["credits_used"]
    assert meta["svc"]["balance_remaining"] == after


def test_auto_reports_served_alias_and_requested(server: Server) -> None:
    key = server.new_key(server.new_account(1_000_000))
    r = _stream(
        server,
        key,
        {"model": "svc-auto", "messages": [{"role": "user", "content": "```python\nx=1\n```"}]},
    )
    chunks = [json.loads(e[6:]) for e in r.text.split("\n\n") if e and e != "data: [DONE]"]
    assert {c["model"] for c in chunks} == {"svc-code"}
    assert chunks[-1]["svc"]["requested_model"] == "svc-auto"


def test_max_tokens_bounds_the_output_and_the_charge(server: Server) -> None:
    pid = server.new_account(100_000)
    key = server.new_key(pid)
    r = _stream(
        server,
        key,
        {"model": "svc-smart", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]},
    )
    chunks = [json.loads(e[6:]) for e in r.text.split("\n\n") if e and e != "data: [DONE]"]
    content = [c for c in chunks if c["choices"]]
    assert len(content) == 3
    # prompt "hi": 2 // 4 + 4 = 4 tokens; smart prices 50 in / 150 out per 1,000
    assert chunks[-1]["svc"]["credits_used"] == -(-(4 * 50 + 3 * 150) // 1000)


def test_default_cap_lowered_to_what_the_balance_affords(server: Server) -> None:
    pid = server.new_account(2)  # 2 credits on Fast: (4*5 + t*15)/1000 <= 2 -> t <= 132
    key = server.new_key(pid)
    r = _stream(server, key, {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200
    assert r.text.endswith("data: [DONE]\n\n")
    assert server.balance(pid) == 1
