"""The OpenAPI document as ``app.http.openapi_document`` completes it: the routes served
over RSGI (the three streams and the Messages API's token count), the credit ceiling header,
the Messages API's key header, bodies, events and Anthropic-shaped errors. The schemathesis
suite (tests/e2e/test_schemathesis.py) holds a real server to the document; these hold the
document to what svc's modules say."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from app.apis.messages import stream as messages_stream
from app.apis.messages.errors import error_body, error_type
from app.apis.messages.wire import CountTokensResponse, StreamEvent
from app.completion.output import SvcMetadata
from app.completion.request import CLAMPED_HEADER
from app.core.errors import ApiError, ErrorKind
from app.core.settings import Settings
from app.credits import ceilings
from app.http.app import create_app
from app.http.openapi_document import complete_document
from app.keys.refusals import CAP_RESETS_HEADER

# create_app registers routes whose parameters use spellings Litestar 2.23+ deprecates.
pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)

MODELS = ["svc-fast", "svc-smart"]
STREAMS = ("/v1/chat/completions", "/v1/responses", "/v1/messages")
MESSAGES_ROUTES = ("/v1/messages", "/v1/messages/count_tokens")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    generated = create_app(Settings()).openapi_schema.to_schema()
    completed = complete_document(
        generated, models=MODELS, key_models=MODELS, max_messages=8, max_message_chars=100
    )
    served: dict[str, Any] = json.loads(json.dumps(completed))  # as served: plain JSON
    return served


def _validator(document: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    """A validator of ``schema`` whose ``$ref``s resolve in ``document``."""
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    registry: Registry[Any] = Registry().with_resource("urn:svc-openapi", resource)
    text = json.dumps(schema).replace('"#/components/', '"urn:svc-openapi#/components/')
    return Draft202012Validator(json.loads(text), registry=registry)


def _valid(document: dict[str, Any], schema: dict[str, Any], instance: Any) -> bool:
    return bool(_validator(document, schema).is_valid(instance))


def _operation(document: dict[str, Any], path: str) -> dict[str, Any]:
    return document["paths"][path]["post"]  # type: ignore[no-any-return]


def _json_schema(response: dict[str, Any]) -> dict[str, Any]:
    return response["content"]["application/json"]["schema"]  # type: ignore[no-any-return]


def test_every_reference_resolves_and_every_component_is_a_schema(
    document: dict[str, Any],
) -> None:
    schemas = document["components"]["schemas"]
    text = json.dumps(document)
    prefix = '"#/components/schemas/'
    named = {part.split('"', 1)[0] for part in text.split(prefix)[1:]}
    assert named <= set(schemas), named - set(schemas)
    for schema in schemas.values():
        Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("path", STREAMS)
def test_the_streams_document_the_credit_ceiling_header(
    document: dict[str, Any], path: str
) -> None:
    operation = _operation(document, path)
    (header,) = [p for p in operation["parameters"] if p["name"] == ceilings.HEADER]
    assert header["in"] == "header"
    assert not header["required"]
    assert header["schema"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": ceilings.MAX_CEILING,
    }
    assert "credit_ceiling_too_low" in operation["responses"]["402"]["description"]
    assert "credit_ceiling_too_low" in header["description"]
    assert "x-should-retry" in operation["responses"]["402"]["headers"]


@pytest.mark.parametrize("path", STREAMS)
def test_the_streams_document_the_lowered_output_limit(document: dict[str, Any], path: str) -> None:
    header = _operation(document, path)["responses"]["200"]["headers"][CLAMPED_HEADER]
    assert not header["required"]
    assert "lowered" in header["description"]
    request = document["components"]["schemas"]
    limits = {
        "/v1/chat/completions": [request["ChatRequest"]["properties"]["max_tokens"]],
        "/v1/responses": [request["ResponsesRequest"]["properties"]["max_output_tokens"]],
        "/v1/messages": [
            request[name]["properties"]["max_tokens"]
            for name in request
            if name.endswith("MessagesRequest")
        ],
    }[path]
    assert limits
    assert all(CLAMPED_HEADER in limit["description"] for limit in limits)


@pytest.mark.parametrize("path", STREAMS)
def test_a_reached_daily_cap_documents_when_it_resets(document: dict[str, Any], path: str) -> None:
    headers = _operation(document, path)["responses"]["429"]["headers"]
    assert "RFC 3339" in headers[CAP_RESETS_HEADER]["description"]
    assert not headers[CAP_RESETS_HEADER]["required"]
    # the retry-after a 429 may carry is the held cap's and the rate limit's, never hours
    assert "midnight" not in headers["retry-after"]["description"]


def test_the_token_count_takes_no_ceiling(document: dict[str, Any]) -> None:
    operation = _operation(document, "/v1/messages/count_tokens")
    assert ceilings.HEADER not in [p["name"] for p in operation["parameters"]]
    assert "402" not in operation["responses"]


def test_a_keys_ceiling_is_documented_where_it_is_set_and_read(
    document: dict[str, Any],
) -> None:
    schemas = document["components"]["schemas"]
    for body in ("KeyCreateRequest", "KeyUpdateRequest"):
        field = schemas[body]["properties"]["max_credits_per_request"]
        integer = field["anyOf"][0]
        assert (integer["minimum"], integer["maximum"]) == (1, ceilings.MAX_CEILING)
    for answer in ("ApiKeyCreated", "ApiKeyItem"):
        assert "description" in schemas[answer]["properties"]["max_credits_per_request"]


@pytest.mark.parametrize("path", MESSAGES_ROUTES)
def test_the_messages_routes_take_either_key_header(document: dict[str, Any], path: str) -> None:
    operation = _operation(document, path)
    assert operation["security"] == [{"apiKey": []}, {"xApiKey": []}]
    scheme = document["components"]["securitySchemes"]["xApiKey"]
    assert (scheme["type"], scheme["in"], scheme["name"]) == ("apiKey", "header", "x-api-key")
    names = {p["name"] for p in operation["parameters"]}
    assert {"anthropic-version", "anthropic-beta"} <= names
    assert _operation(document, "/v1/chat/completions")["security"] == [{"apiKey": []}]


@pytest.mark.parametrize("path", MESSAGES_ROUTES)
def test_the_messages_routes_document_anthropics_error_bodies(
    document: dict[str, Any], path: str
) -> None:
    """Each error status: an error body as svc writes it passes with that status's type
    and fails with another's; OpenAI's body does not pass."""
    responses = _operation(document, path)["responses"]
    statuses = [int(status) for status in responses if status != "200"]
    assert statuses
    for status in statuses:
        response = responses[str(status)]
        assert response["headers"]["request-id"]["required"]
        schema = _json_schema(response)
        kind = next(k for k in ErrorKind if k.status == status)
        body = msgspec.json.decode(error_body(ApiError(kind, "No."), "req_1"))
        assert _valid(document, schema, body), (status, body)
        other = "api_error" if error_type(status) != "api_error" else "not_found_error"
        assert not _valid(document, schema, {**body, "error": {**body["error"], "type": other}})
        assert not _valid(document, schema, msgspec.json.decode(ApiError(kind, "No.").body()))


def test_the_openai_routes_keep_openais_error_body(document: dict[str, Any]) -> None:
    for path in ("/v1/chat/completions", "/v1/responses"):
        schema = _json_schema(_operation(document, path)["responses"]["402"])
        assert schema == {"$ref": "#/components/schemas/ErrorBody"}


def _event_schema(document: dict[str, Any]) -> dict[str, Any]:
    response = _operation(document, "/v1/messages")["responses"]["200"]
    return response["content"]["text/event-stream"]["schema"]  # type: ignore[no-any-return]


def test_the_messages_stream_names_every_event(document: dict[str, Any]) -> None:
    tags = [branch["properties"]["event"]["const"] for branch in _event_schema(document)["oneOf"]]
    assert sorted(tags) == sorted(s.__struct_config__.tag for s in StreamEvent.__args__)


def test_the_messages_events_as_written_pass_and_an_upstreams_field_does_not(
    document: dict[str, Any],
) -> None:
    """The event's ``data`` against its component (closed: svc writes nothing else)."""
    schemas = document["components"]["schemas"]
    svc = SvcMetadata(requested_model="svc-fast", credits_used=3, balance_remaining=97)
    failed = messages_stream.error_event("api_error", "Upstream failed.", svc)
    for raw, name in (
        (messages_stream.PING, "Ping"),
        (failed, "ErrorEvent"),
    ):
        data = json.loads(raw.split(b"data: ", 1)[1])
        schema = {"$ref": f"#/components/schemas/{name}"}
        assert _valid(document, schema, data)
        assert not _valid(document, schema, {**data, "model": "upstream-model-1"})
    assert schemas["ErrorEvent"]["additionalProperties"] is False


def test_the_token_count_answer(document: dict[str, Any]) -> None:
    response = _operation(document, "/v1/messages/count_tokens")["responses"]["200"]
    schema = _json_schema(response)
    assert _valid(document, schema, msgspec.to_builtins(CountTokensResponse(input_tokens=12)))
    assert not _valid(document, schema, {"input_tokens": 12, "model": "x"})


def _message(**fields: Any) -> dict[str, Any]:
    return {"model": "svc-fast", "max_tokens": 16, **fields}


@pytest.mark.parametrize(
    ("body", "valid"),
    [
        (_message(messages=[{"role": "user", "content": "hi"}]), True),
        (_message(messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]), True),
        (_message(messages=[{"role": "assistant", "content": ""}]), True),
        (_message(messages=[{"role": "user", "content": ""}]), False),
        (_message(messages=[{"role": "user", "content": []}]), False),
        (_message(messages=[]), False),
        (_message(messages=[{"role": "user", "content": "hi"}] * 9), False),
        (_message(model="gpt-4o", messages=[{"role": "user", "content": "hi"}]), False),
        (_message(messages=[{"role": "user", "content": "x" * 101}]), False),
        (
            _message(
                messages=[
                    {
                        "role": "system",
                        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                    }
                ]
            ),
            False,
        ),
        (
            _message(
                messages=[
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                    }
                ]
            ),
            True,
        ),
        (_message(messages=[{"role": "user", "content": "hi"}], mcp_servers=[{}]), False),
        (_message(messages=[{"role": "user", "content": "hi"}], stop_sequences=["a"] * 5), False),
    ],
)
def test_the_messages_body_states_the_limits_checked_after_decoding(
    document: dict[str, Any], body: dict[str, Any], valid: bool
) -> None:
    schema = _json_schema(_operation(document, "/v1/messages")["requestBody"])
    assert _valid(document, schema, body) is valid


def test_the_responses_stream_documents_the_omitted_tools_header(
    document: dict[str, Any],
) -> None:
    headers = _operation(document, "/v1/responses")["responses"]["200"]["headers"]
    assert "hosted tool" in headers["svc-omitted-tools"]["description"]
    assert "svc-omitted-tools" not in _operation(document, "/v1/chat/completions")["responses"][
        "200"
    ].get("headers", {})
