"""Anthropic's structured outputs (``output_config.format``) as svc forwards them
(``app.apis.messages.output_format``): a strict ``json_schema`` response format on the chat
path, ``output_config`` as written to a provider that serves the Messages API, the
simulated upstream's reply JSON that fits the schema, and a schema svc cannot take refused
by name in Anthropic's shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from app.apis.messages.errors import error_body
from app.apis.messages.output_format import OUTPUT_FORMAT_NAME
from app.apis.messages.request import parse_messages_request
from app.completion.catalog import default_catalog, load_catalog
from app.completion.request import CompletionRequest
from app.core.errors import ApiError
from app.upstream.base import UpstreamCall
from app.upstream.json_schema import SchemaDocument
from app.upstream.simulated import SimulatedProvider

ALIASES = default_catalog().aliases
CITY: dict[str, Any] = {
    "type": "object",
    "title": "City",
    "properties": {
        "name": {"type": "string"},
        "population": {"type": "integer"},
        "coastal": {"type": "boolean"},
    },
    "required": ["name", "population", "coastal"],
    "additionalProperties": False,
}
OUTPUT_CONFIG = {"format": {"type": "json_schema", "schema": CITY}, "effort": "low"}


def _parse(
    body: dict[str, Any], aliases: dict[str, Any] = ALIASES, max_message_chars: int = 100_000
) -> CompletionRequest:
    request = {
        "model": "svc-fast",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "A city, please."}],
        **body,
    }
    return parse_messages_request(
        json.dumps(request).encode(),
        aliases,
        max_messages=100,
        max_message_chars=max_message_chars,
        image_token_bound=1000,
    )


def _forwarded(params: CompletionRequest) -> dict[str, Any]:
    """The chat request as it goes upstream."""
    return dict(msgspec.to_builtins(params.request))


def test_a_json_schema_format_is_a_strict_json_schema_response_format() -> None:
    sent = _forwarded(_parse({"output_config": OUTPUT_CONFIG}))
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "City", "schema": CITY, "strict": True},
    }
    assert "effort" not in json.dumps({k: v for k, v in sent.items() if k != "response_format"})


def test_a_schema_without_a_usable_title_gets_svcs_name() -> None:
    for schema in (
        {"type": "object"},
        {"type": "object", "title": "A city (any)"},  # not a name OpenAI takes
        {"type": "object", "title": 7},
    ):
        config = {"format": {"type": "json_schema", "schema": schema}}
        sent = _forwarded(_parse({"output_config": config}))
        assert sent["response_format"]["json_schema"]["name"] == OUTPUT_FORMAT_NAME


def test_no_format_asks_for_no_response_format() -> None:
    for body in ({}, {"output_config": {"effort": "high"}}, {"output_config": {"format": None}}):
        assert "response_format" not in _forwarded(_parse(body))


def _refused(body: dict[str, Any], **limits: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        _parse(body, **limits)
    assert info.value.status == 400
    return info.value


@pytest.mark.parametrize(
    ("output_config", "param"),
    [
        ({"format": {"type": "json_schema", "schema": ["not", "an", "object"]}}, "schema"),
        ({"format": {"type": "json_schema", "schema": "{}"}}, "schema"),
        ({"format": {"type": "json_schema"}}, ""),
        ({"format": {"type": "json_object", "schema": CITY}}, "type"),
        ({"format": "json"}, ""),
    ],
)
def test_a_format_svc_cannot_take_is_refused_naming_it(
    output_config: dict[str, Any], param: str
) -> None:
    error = _refused({"output_config": output_config})
    assert error.param == "output_config.format" + (f".{param}" if param else "")
    body = json.loads(error_body(error, "req_1"))
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "output_config.format" in body["error"]["message"]


def test_a_schema_longer_than_a_message_may_be_is_refused() -> None:
    config = {"format": {"type": "json_schema", "schema": CITY}}
    limit = len(json.dumps(CITY, separators=(",", ":")))
    assert "response_format" in _forwarded(
        _parse({"output_config": config}, max_message_chars=limit)
    )
    error = _refused({"output_config": config}, max_message_chars=limit - 1)
    assert error.param == "output_config.format.schema"
    assert f"at most {limit - 1} characters" in error.message


def test_a_messages_provider_is_sent_output_config_as_written(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text(
        '[providers.claude]\nbase_url = "http://a/v1"\nmessages_api = true\n'
        '[providers.chat]\nbase_url = "http://a/v1"\n'
        "[aliases.svc-fast]\nupstreams = ["
        '{ provider = "claude", model = "c" }, { provider = "chat", model = "x" }]\n'
    )
    params = _parse({"output_config": OUTPUT_CONFIG}, load_catalog(path).aliases)
    assert params.native is not None
    native = msgspec.json.decode(params.native.body("c", 100))
    assert native["output_config"] == OUTPUT_CONFIG  # effort too: the provider reads it
    assert "response_format" not in native
    # the translation keeps the format, for a failover to the chat provider
    assert _forwarded(params)["response_format"]["json_schema"]["schema"] == CITY


def test_the_simulated_upstream_answers_json_that_fits_the_schema() -> None:
    params = _parse({"output_config": OUTPUT_CONFIG})
    call = UpstreamCall(model="sim", request=params.request, max_tokens=256)
    pieces = SimulatedProvider().reply(call)
    reply = json.loads("".join(piece for piece in pieces if isinstance(piece, str)))
    assert set(reply) == {"name", "population", "coastal"}
    assert SchemaDocument(CITY).fits(reply, CITY)
    assert isinstance(reply["population"], int)
