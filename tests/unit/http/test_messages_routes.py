# ruff: noqa: F811
# (the fixtures imported from test_http_routes are the tests' parameters)
"""The Messages API's routes in process (``POST /v1/messages``, ``POST
/v1/messages/count_tokens``) through the Gateway on fakeredis and SQLite: the key in
``x-api-key`` or ``Authorization``, Anthropic's event sequence with svc's metadata on
``message_stop``, Anthropic's error shape before the first byte, and a count that reserves
nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.accounts.bodies import KeyCreateRequest
from app.apis.messages.request import parse_count_tokens_request
from app.completion.catalog import default_catalog
from app.credits.ceilings import HEADER as CEILING
from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
MESSAGES = "/v1/messages"
COUNT = "/v1/messages/count_tokens"
BODY = {"model": "svc-fast", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Each event's ``event:`` name and ``data:`` JSON."""
    out = []
    for block in text.strip().split("\n\n"):
        name, data = block.split("\n")
        assert name.startswith("event: ")
        assert data.startswith("data: ")
        out.append((name[7:], json.loads(data[6:])))
    return out


async def _balance(svc: Svc) -> int:
    return (await svc.services.accounts.balance(svc.account.pid)).total_available


@pytest.mark.parametrize(
    "auth", [("x-api-key", "{key}"), ("authorization", "Bearer {key}")], ids=["x-api-key", "bearer"]
)
async def test_a_message_streams_anthropics_events_and_is_charged_its_svc_credits(
    svc: Svc, auth: tuple[str, str]
) -> None:
    before = await _balance(svc)
    headers = {auth[0]: auth[1].format(key=svc.account.live_key), "anthropic-version": "2023-06-01"}
    async with svc.client() as client:
        r = await client.post(MESSAGES, json=BODY, headers=headers)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
    events = _events(r.text)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert all(data["type"] == name for name, data in events)
    start = events[0][1]["message"]
    assert start["id"].startswith("msg_svc_")
    assert start["model"] == "svc-fast"
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == len(names[3:-3])
    svc_meta = events[-1][1]["svc"]
    assert svc_meta["requested_model"] == "svc-fast"
    assert before - await _balance(svc) == svc_meta["credits_used"] >= 1
    assert svc_meta["balance_remaining"] == before - svc_meta["credits_used"]


async def test_the_path_with_a_trailing_slash_and_claude_codes_beta_query_serve_too(
    svc: Svc,
) -> None:
    headers = {"x-api-key": svc.account.live_key, "anthropic-beta": "interleaved-thinking"}
    async with svc.client() as client:
        for path in (MESSAGES + "/", MESSAGES + "?beta=true"):
            r = await client.post(path, json=BODY, headers=headers)
            assert r.status_code == 200, (path, r.text)
            assert _events(r.text)[-1][0] == "message_stop"


@pytest.mark.parametrize(
    ("headers", "body", "status", "error_type", "says"),
    [
        ({}, BODY, 401, "authentication_error", "API key"),
        ({"x-api-key": "svc_live_nope"}, BODY, 401, "authentication_error", "API key"),
        (None, {**BODY, "max_tokens": None}, 400, "invalid_request_error", "max_tokens"),
        (None, {**BODY, "model": "claude-opus-4"}, 404, "not_found_error", "claude-opus-4"),
        (
            None,
            {**BODY, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            400,
            "invalid_request_error",
            "tools[0].type",
        ),
        (
            {CEILING: "1"},
            {**BODY, "messages": [{"role": "user", "content": "word " * 1000}]},
            402,
            "billing_error",
            "credit ceiling",
        ),
    ],
)
async def test_a_refusal_is_anthropics_error_shape_and_takes_nothing(
    svc: Svc,
    headers: dict[str, str] | None,
    body: dict[str, Any],
    status: int,
    error_type: str,
    says: str,
) -> None:
    sent = {"x-api-key": svc.account.live_key, **(headers or {})} if headers != {} else {}
    before = await _balance(svc)
    async with svc.client() as client:
        r = await client.post(
            MESSAGES,
            content=json.dumps({k: v for k, v in body.items() if v is not None}),
            headers=sent,
        )
    assert r.status_code == status, r.text
    answer = r.json()
    assert answer["type"] == "error"
    assert answer["error"]["type"] == error_type
    assert says in answer["error"]["message"]
    assert answer["request_id"] == r.headers["request-id"] == r.headers["x-request-id"]
    assert await _balance(svc) == before


async def test_count_tokens_answers_the_reserved_bound_and_charges_nothing(svc: Svc) -> None:
    body = {"model": "svc-fast", "messages": [{"role": "user", "content": "hello there"}]}
    raw = json.dumps(body).encode()
    expected = parse_count_tokens_request(
        raw,
        default_catalog().aliases,
        max_messages=2048,
        max_message_chars=1_000_000,
        image_token_bound=4_096,
    ).prompt_token_bound
    before = await _balance(svc)
    async with svc.client() as client:
        r = await client.post(COUNT, content=raw, headers={"x-api-key": svc.account.live_key})
        assert (r.status_code, r.json()) == (200, {"input_tokens": expected})
        assert r.headers["cache-control"] == "no-store"
        bearer = {"authorization": f"Bearer {svc.account.live_key}"}
        assert (await client.post(COUNT, content=raw, headers=bearer)).json() == r.json()
        refused = await client.post(COUNT, content=raw, headers={"x-api-key": "svc_live_x"})
        assert (refused.status_code, refused.json()["error"]["type"]) == (
            401,
            "authentication_error",
        )
        wrong = await client.get(COUNT, headers={"x-api-key": svc.account.live_key})
        assert wrong.status_code == 405
        assert wrong.json()["type"] == "error"
    assert await _balance(svc) == before


async def test_count_tokens_holds_a_key_to_its_models(svc: Svc) -> None:
    scoped = await svc.services.api_keys.create_key(
        svc.account.pid,
        KeyCreateRequest(
            name="fast only",
            environment="live",
            daily_cap_credits=None,
            allowed_models=["svc-fast"],
        ),
    )
    body = {"model": "svc-smart", "messages": [{"role": "user", "content": "hi"}]}
    async with svc.client() as client:
        r = await client.post(COUNT, json=body, headers={"x-api-key": scoped.key})
        assert (r.status_code, r.json()["error"]["type"]) == (403, "permission_error")
        ok = await client.post(
            COUNT, json={**body, "model": "svc-fast"}, headers={"x-api-key": scoped.key}
        )
        assert ok.status_code == 200


async def test_count_tokens_counts_against_the_keys_rate_limit(svc: Svc) -> None:
    """Issue 44, item 13: a count is one of the requests a key's rate_limit_rpm allows, in
    the log its completions start in; over it, the completions' 429 in Anthropic's shape.
    A count refused for its body is not counted."""
    limited = await svc.services.api_keys.create_key(
        svc.account.pid,
        KeyCreateRequest(
            name="two a minute", environment="live", daily_cap_credits=None, rate_limit_rpm=2
        ),
    )
    key = {"x-api-key": limited.key}
    body = {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}
    async with svc.client() as client:
        bad = await client.post(COUNT, json={"model": "svc-fast"}, headers=key)
        assert bad.status_code == 400
        assert (await client.post(COUNT, json=body, headers=key)).status_code == 200
        assert (await client.post(MESSAGES, json=BODY, headers=key)).status_code == 200
        over = await client.post(COUNT, json=body, headers=key)
        assert over.status_code == 429
        answer = over.json()
        assert answer["type"] == "error"
        assert answer["error"]["type"] == "rate_limit_error"
        assert "rate limit" in answer["error"]["message"]
        assert 1 <= int(over.headers["retry-after"]) <= 60
        assert int(over.headers["retry-after-ms"]) > 0
        # the completions see the same log: the key's minute is spent
        completion = await client.post(MESSAGES, json=BODY, headers=key)
        assert completion.status_code == 429
        assert completion.json()["error"]["type"] == "rate_limit_error"


async def test_an_upstream_chat_request_is_what_the_messages_request_says(svc: Svc) -> None:
    """Through the route, a system prompt, a tool and a stop sequence reach the chat path
    as the translation says (the stream's tool call comes back as a tool_use block)."""
    body = {
        **BODY,
        "system": "Be brief.",
        "tools": [
            {
                "name": "get_weather",
                "description": "The weather",
                "input_schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            }
        ],
        "tool_choice": {"type": "any"},
        "stop_sequences": ["END"],
    }
    async with svc.client() as client:
        r = await client.post(MESSAGES, json=body, headers={"x-api-key": svc.account.live_key})
    events = _events(r.text)
    starts = [data["content_block"] for name, data in events if name == "content_block_start"]
    assert starts[0]["type"] == "tool_use"
    assert starts[0]["name"] == "get_weather"
    assert starts[0]["id"].startswith("toolu_svc_")
    pieces = [
        data["delta"]["partial_json"]
        for name, data in events
        if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta"
    ]
    assert "city" in json.loads("".join(pieces))
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
