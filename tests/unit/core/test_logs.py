"""JSON log lines: shape, request id, and secrets scrubbed from whatever a message quotes."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from app.core.logs import REDACTED, JsonFormatter, redact, request_id
from app.keys.format import generate_key


def _format(record: logging.LogRecord) -> dict[str, object]:
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert isinstance(parsed, dict)
    return parsed


def _record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("svc.test", logging.WARNING, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_a_record_is_one_json_object_with_the_request_id() -> None:
    token = request_id.set("req_abc")
    try:
        entry = _format(_record("upstream %s failed", "openai", provider="openai", status=502))
    finally:
        request_id.reset(token)
    assert entry["level"] == "warning"
    assert entry["logger"] == "svc.test"
    assert entry["msg"] == "upstream openai failed"
    assert entry["request_id"] == "req_abc"
    assert entry["provider"] == "openai"
    assert entry["status"] == 502
    assert str(entry["ts"]).endswith("Z")


def test_outside_a_request_there_is_no_request_id() -> None:
    assert "request_id" not in _format(_record("flushed"))


@pytest.mark.parametrize("environment", ["live", "test"])
def test_api_keys_are_scrubbed_from_messages_extras_and_tracebacks(environment: str) -> None:
    secret = generate_key(environment)
    try:
        raise ValueError(f"bad key {secret}")
    except ValueError:
        record = _record("saw %s", secret, header=f"Bearer {secret}")
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert secret not in line
    assert secret[:20] not in line
    assert line.count(REDACTED) >= 3


@pytest.mark.parametrize(
    ("text", "leak"),
    [
        ("Authorization: Bearer abc.def-123", "abc.def-123"),
        ('{"authorization": "tok_9f8e7d"}', "tok_9f8e7d"),
        ("upstream said: Incorrect API key provided: sk-proj-AbCdEf123456", "AbCdEf123456"),
        ("bearer XyZ987", "XyZ987"),
    ],
)
def test_bearer_tokens_and_provider_keys_are_scrubbed(text: str, leak: str) -> None:
    assert leak not in redact(text)
    assert REDACTED in redact(text)


def test_plain_text_is_left_alone() -> None:
    text = "flushed 1000 events for shard 12 in 3.2 ms"
    assert redact(text) == text
