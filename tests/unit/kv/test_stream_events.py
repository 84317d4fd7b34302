"""A stream entry parses to the same event whether the client answered bytes or text."""

from __future__ import annotations

from app.kv.fields import USAGE_UPSTREAM, Rates, Served
from app.kv.stream_events import CapEvent, ExpiryEvent, UsageEvent, parse_event

SERVED = Served(
    response_id="chatcmpl-svc-1",
    created=1_780_000_000,
    ttfb_ms=40,
    duration_ms=900,
    usage_source=USAGE_UPSTREAM,
    prices=Rates(150, 75, 190, 600),
    provider="openai",
    upstream_model="gpt-4o mini",  # the only part that may hold a space
    cost_currency="USD",
    upstream_cost=1234,
)


def _as_bytes(fields: dict[str, str]) -> dict[bytes, bytes]:
    return {k.encode(): v.encode() for k, v in fields.items()}


def test_usage_events_parse_alike_from_bytes_and_text() -> None:
    fields = {
        "rid": "rsv_1", "acct": "acct_A", "kid": "k1", "env": "live", "alias": "svc-fast",
        "requested": "svc", "day": "2026-05-28", "prompt_tokens": "24",
        "completion_tokens": "100", "credits": "3", "earned": "1", "outcome": "completed",
        "ts": "1780000001", "api": "responses", "served": SERVED.text(),
        "cached_tokens": "16", "failovers": "2",
    }  # fmt: skip
    event = parse_event("1-0", fields)
    assert parse_event(b"1-0", _as_bytes(fields)) == event
    assert isinstance(event, UsageEvent)
    assert event.served == SERVED
    assert (event.api, event.cached_tokens, event.reasoning_tokens, event.failovers) == (
        "responses",
        16,
        0,
        2,
    )
    assert Served.parse(SERVED.text().replace(" USD ", " - ")).cost_currency == ""


def test_other_events_parse_alike_from_bytes_and_text() -> None:
    expiry = {"kind": "expire", "acct": "acct_A", "credits": "40", "ts": "7"}
    cap = {
        "kind": "cap", "acct": "acct_A", "kid": "k1", "level": "80", "cap": "1000",
        "spent": "800", "counter": "c", "ts": "8",
    }  # fmt: skip
    assert parse_event(b"2-0", _as_bytes(expiry)) == ExpiryEvent("2-0", "acct_A", 40, 7)
    assert parse_event(b"3-0", _as_bytes(cap)) == parse_event("3-0", cap)
    assert isinstance(parse_event("3-0", cap), CapEvent)
