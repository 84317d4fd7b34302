"""Schemathesis against the running server's own OpenAPI document (``/schema/openapi.json``).

Every documented operation gets generated requests, valid and invalid, sent with a real live
key or the admin token; each response must be no 5xx, a documented status, content type and
headers, a body (event stream included) that matches its schema, and free of internals.
The seed is fixed and the example count bounded, so a run is repeatable and short.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis import BaseSchema, Case, CheckContext, GenerationMode, Response
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.apis.chat.chunks import DONE, ChunkEncoder, chunk_usage, error_event
from app.apis.messages import stream as messages_stream
from app.completion.output import SvcMetadata
from app.http.headers import SECURITY_HEADERS
from tests.e2e.conftest import Server
from tests.e2e.leaks import INTERNALS

pytestmark = pytest.mark.e2e

# Per operation and mode; SVC_SCHEMATHESIS_EXAMPLES=500 for a deeper run by hand.
MAX_EXAMPLES = int(os.environ.get("SVC_SCHEMATHESIS_EXAMPLES", "30"))
CREDITS = 10**9  # far more than the run can spend


READY_CHECKS = re.compile(r'"checks":\{[^}]*\}')


def no_internals(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """The body names no module, exception class, backend or SQL (``/readyz`` names the
    dependencies it checks, as documented for operators: those keys are left out; the
    operators' ``/metrics`` describes svc's parts by design and is not checked). What the
    request itself sent (a path or query value an error names back: "No account
    'valkey'.") is not svc's to hide."""
    text = response.content.decode("utf-8", "replace")
    for sent in (*(case.path_parameters or {}).values(), *(case.query or {}).values()):
        if isinstance(sent, str) and sent:
            text = text.replace(sent, "")
    if case.operation.path == "/metrics":
        return None
    if case.operation.path == "/readyz":
        text = READY_CHECKS.sub("", text)
    found = INTERNALS.search(text)
    if found is not None:
        raise AssertionError(f"response shows internals ({found.group(0)!r}): {text[:300]}")
    return None


CHECKS: list[Any] = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    no_internals,
]


@dataclass
class Known:
    """A funded account with a live key for the /v1 operations, and ids that exist."""

    key: str
    pid: str
    spare_key_id: str  # another key of that account, for the DELETE cases to revoke
    idle_pid: str  # an account the status cases may disable (``pid``'s key must serve)
    activity_id: str  # a request of ``pid`` (its key's), for the receipts


@pytest.fixture(scope="module")
def api_schema(server: Server) -> BaseSchema:
    config = schemathesis.Config.from_dict({"base-url": server.root_url, "request-timeout": 30})
    return schemathesis.openapi.from_url(f"{server.root_url}/schema/openapi.json", config=config)


@pytest.fixture(scope="module")
def known(server: Server) -> Known:
    pid = server.new_account(CREDITS)
    spare = server.admin(
        "POST",
        f"/accounts/{pid}/api-keys",
        {"name": "spare", "environment": "live", "daily_cap_credits": None},
    )
    key = server.new_key(pid, role="admin")
    served = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert served.status_code == 200, served.text
    return Known(
        key=key,
        pid=pid,
        spare_key_id=spare.json()["id"],
        idle_pid=server.new_account(0),
        activity_id=served.text.split('"id":"', 1)[1].split('"', 1)[0],
    )


# Every operation of the document; a new route fails the first test until it is listed here.
OPERATIONS = [
    "POST /v1/chat/completions",
    "POST /v1/responses",
    "POST /v1/messages",
    "POST /v1/messages/count_tokens",
    "GET /v1/models",
    "GET /v1/models/{model}",
    "GET /v1/pricing",
    "GET /v1/credits",
    "GET /v1/credits/ledger",
    "GET /v1/usage",
    "GET /v1/activity",
    "GET /v1/activity/{activity_id}",
    "GET /v1/api-keys",
    "POST /v1/api-keys",
    "PATCH /v1/api-keys/{key_id}",
    "POST /v1/api-keys/{key_id}/rotate",
    "DELETE /v1/api-keys/{key_id}",
    "POST /v1/webhooks",
    "GET /v1/webhooks",
    "PATCH /v1/webhooks/{webhook_id}",
    "DELETE /v1/webhooks/{webhook_id}",
    "GET /v1/webhooks/{webhook_id}/deliveries",
    "POST /v1/spotlights/intents",
    "POST /v1/spotlights/verified",
    "GET /v1/spotlights/admob",
    "GET /v1/spotlights/applovin",
    "GET /v1/spotlights/levelplay",
    "GET /v1/spotlights/rewards",
    "GET /v1/purchases/account-token",
    "POST /v1/purchases/stripe",
    "POST /v1/purchases/google",
    "POST /v1/purchases/google/notifications",
    "POST /v1/purchases/apple",
    "POST /v1/purchases/apple/notifications",
    "POST /admin/v1/accounts",
    "GET /admin/v1/accounts",
    "GET /admin/v1/accounts/{pid}",
    "PATCH /admin/v1/accounts/{pid}",
    "POST /admin/v1/accounts/{pid}/grants",
    "POST /admin/v1/accounts/{pid}/debits",
    "GET /admin/v1/accounts/{pid}/ledger",
    "GET /admin/v1/accounts/{pid}/credits",
    "POST /admin/v1/accounts/{pid}/api-keys",
    "PATCH /admin/v1/accounts/{pid}/api-keys/{key_id}",
    "POST /admin/v1/accounts/{pid}/api-keys/{key_id}/rotate",
    "DELETE /admin/v1/accounts/{pid}/api-keys/{key_id}",
    "POST /admin/v1/accounts/{pid}/spotlights",
    "GET /admin/v1/accounts/{pid}/activity",
    "GET /admin/v1/accounts/{pid}/activity/{activity_id}",
    "GET /admin/v1/accounts/{pid}/webhooks",
    "GET /admin/v1/accounts/{pid}/webhooks/{webhook_id}/deliveries",
    "GET /admin/v1/audit",
    "GET /admin/v1/purchases",
    "GET /admin/v1/books",
    "GET /admin/v1/usage-lag",
    "GET /healthz",
    "GET /readyz",
    "GET /metrics",
]
# Operations with a typed input (a body or the ``days`` query) for negative cases to break;
# the others take none, or only a free-form id, and run positive cases only.
NEGATABLE = {
    "POST /v1/chat/completions",
    "POST /v1/responses",
    "POST /v1/messages",
    "POST /v1/messages/count_tokens",
    "GET /v1/usage",
    "GET /v1/activity",
    "GET /v1/credits/ledger",
    "GET /v1/spotlights/rewards",
    "POST /v1/purchases/apple",
    "POST /v1/purchases/apple/notifications",
    "POST /v1/api-keys",
    "PATCH /v1/api-keys/{key_id}",
    "POST /v1/api-keys/{key_id}/rotate",
    "POST /v1/webhooks",
    "PATCH /v1/webhooks/{webhook_id}",
    "GET /admin/v1/accounts",
    "GET /admin/v1/audit",
    "GET /admin/v1/purchases",
    "GET /admin/v1/books",
    "GET /admin/v1/accounts/{pid}/ledger",
    "PATCH /admin/v1/accounts/{pid}",
    "POST /admin/v1/accounts/{pid}/grants",
    "POST /admin/v1/accounts/{pid}/debits",
    "POST /admin/v1/accounts/{pid}/api-keys",
    "PATCH /admin/v1/accounts/{pid}/api-keys/{key_id}",
    "POST /admin/v1/accounts/{pid}/api-keys/{key_id}/rotate",
    "POST /admin/v1/accounts/{pid}/spotlights",
}
CASES = [
    pytest.param(label, mode, False, id=f"{label}-{mode.value}")
    for label in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or label in NEGATABLE
] + [
    # A generated id names nothing (404): these run again with ids that exist.
    pytest.param(label, GenerationMode.POSITIVE, True, id=f"{label}-existing")
    for label in OPERATIONS
    if "{" in label
]


def test_the_document_lists_every_operation(api_schema: BaseSchema) -> None:
    labels = [result.ok().label for result in api_schema.get_all_operations()]
    assert sorted(labels) == sorted(OPERATIONS)


@pytest.mark.parametrize(("label", "mode", "existing"), CASES)
def test_operation_honours_the_document(
    server: Server,
    api_schema: BaseSchema,
    known: Known,
    label: str,
    mode: GenerationMode,
    existing: bool,
) -> None:
    operation = api_schema.find_operation_by_label(label)
    assert operation is not None
    token = server.admin_token if " /admin/" in label else known.key
    pid = known.idle_pid if label == "PATCH /admin/v1/accounts/{pid}" else known.pid
    ids = {
        "pid": pid,
        "key_id": known.spare_key_id,
        "model": "svc-fast",
        "activity_id": known.activity_id,
    }
    ids = ids if existing else {}
    strategy = operation.as_strategy(
        mode,
        headers={"Authorization": f"Bearer {token}"},
        path_parameters={name: value for name, value in ids.items() if f"{{{name}}}" in label},
    )

    @hypothesis.settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,  # a loaded CI machine is slow: the example count bounds the run
        derandomize=True,  # the same cases every run: never flaky
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(case=strategy)
    def run(case: Case) -> None:
        case.call_and_validate(checks=CHECKS)

    run()


def _stream(*events: bytes) -> httpx.Response:
    response = httpx.Response(
        200,
        headers={"content-type": "text/event-stream; charset=utf-8", **dict(SECURITY_HEADERS)},
        content=b"".join(events),
        request=httpx.Request("POST", "http://svc.invalid/v1/chat/completions"),
    )
    response.elapsed = timedelta(0)  # as if received: schemathesis reads it
    return response


def test_the_stream_schema_is_enforced(api_schema: BaseSchema) -> None:
    """The SSE schema is checked event by event: what ChunkEncoder writes passes; a chunk
    with an upstream field, a missing field or a stray event does not."""
    operation = api_schema.find_operation_by_label("POST /v1/chat/completions")
    assert operation is not None
    case = operation.Case(
        body={"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}
    )
    enc = ChunkEncoder(7, 1_767_225_600, "svc-fast")
    content = [
        enc.content("Hel", first=True, last=False),
        enc.content("lo", first=False, last=True),
    ]
    tail = [enc.metadata("svc-fast", 3, 97, chunk_usage(9, 2, None)), DONE]
    checks: list[Any] = [response_schema_conformance]
    case.validate_response(_stream(*content, *tail), checks=checks)
    case.validate_response(
        _stream(*content, error_event("Upstream failed.", "upstream_error", "x"), *tail),
        checks=checks,
    )
    leaked = enc.content("x", first=False, last=False).replace(
        b'"object"', b'"system_fingerprint":"fp_1","object"'
    )
    broken = enc.content("x", first=False, last=False).replace(b'"index":0,', b"")
    for bad in (leaked, broken, b"data: not json\n\n"):
        with pytest.raises(FailureGroup):
            case.validate_response(_stream(*content, bad, *tail), checks=checks)


def test_the_responses_stream_schema_is_enforced(api_schema: BaseSchema, server: Server) -> None:
    """A real Responses stream passes; an event without its sequence number, or one that is
    not a Responses event, does not."""
    operation = api_schema.find_operation_by_label("POST /v1/responses")
    assert operation is not None
    case = operation.Case(body={"model": "svc-fast", "input": "hi"})
    key = server.new_key(server.new_account(1_000))
    real = httpx.post(
        f"{server.base_url}/responses",
        json={"model": "svc-fast", "input": "hi"},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    checks: list[Any] = [response_schema_conformance]
    case.validate_response(_stream(real.content), checks=checks)
    unnumbered = b'event: response.created\ndata: {"type":"response.created"}\n\n'
    chat_chunk = ChunkEncoder(7, 1_767_225_600, "svc-fast").content("x", first=True, last=False)
    for bad in (unnumbered, chat_chunk):
        with pytest.raises(FailureGroup):
            case.validate_response(_stream(real.content, bad), checks=checks)


MESSAGE = {"model": "svc-fast", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


def test_the_messages_stream_schema_is_enforced(api_schema: BaseSchema, server: Server) -> None:
    """A real Messages stream passes, and so does the ``error`` event that ends a failed
    one; an event whose ``event`` line is not its type, one without an ``event`` line, one
    with a field svc does not write, or a stray type, does not."""
    operation = api_schema.find_operation_by_label("POST /v1/messages")
    assert operation is not None
    case = operation.Case(body=MESSAGE)
    key = server.new_key(server.new_account(1_000))
    real = httpx.post(
        f"{server.base_url}/messages", json=MESSAGE, headers={"x-api-key": key}, timeout=30
    )
    assert real.status_code == 200, real.text
    assert b"event: message_stop\n" in real.content
    checks: list[Any] = [response_schema_conformance]
    case.validate_response(_stream(real.content), checks=checks)
    svc = SvcMetadata(requested_model="svc-fast", credits_used=1, balance_remaining=9)
    failed = messages_stream.error_event("api_error", "Upstream failed.", svc)
    case.validate_response(_stream(real.content, failed), checks=checks)
    ping = messages_stream.PING
    for bad in (
        ping.replace(b"event: ping", b"event: message_stop"),
        ping.replace(b"event: ping\n", b""),
        ping.replace(b'{"type":"ping"}', b'{"type":"ping","model":"upstream-model-1"}'),
        b'event: debug\ndata: {"type":"debug"}\n\n',
    ):
        with pytest.raises(FailureGroup):
            case.validate_response(_stream(real.content, bad), checks=checks)


@pytest.mark.parametrize("label", ["POST /v1/messages", "POST /v1/messages/count_tokens"])
def test_the_messages_routes_take_the_key_in_x_api_key(
    server: Server, api_schema: BaseSchema, known: Known, label: str
) -> None:
    """The document's other way to send the key, as Anthropic's clients do: answers to it
    honour the document too, and a wrong key is an Anthropic-shaped 401."""
    operation = api_schema.find_operation_by_label(label)
    assert operation is not None
    body = MESSAGE
    if label.endswith("/count_tokens"):
        body = {name: value for name, value in MESSAGE.items() if name != "max_tokens"}
    for key, status in ((known.key, 200), ("svc_live_" + "x" * 40, 401)):
        case = operation.Case(headers={"x-api-key": key}, body=body, media_type="application/json")
        response = case.call_and_validate(checks=CHECKS)
        assert response.status_code == status, response.text
    assert response.json()["error"]["type"] == "authentication_error"


DEEP = b"[" * 1000 + b"]" * 1000
# Explicit hostile cases generation rarely reaches: invalid UTF-8 inside a string, nesting
# past the decoder's depth limit inside an ignored field, a number written as a string.
HOSTILE_BODIES = {
    "POST /v1/chat/completions": [
        b'{"model":"svc-fast","messages":[{"role":"user","content":"\xff\xfe"}]}',
        b'{"model":"svc-fast","messages":[{"role":"user","content":"hi"}],"x":%s}' % DEEP,
        b'{"model":"svc-fast","messages":[{"role":"user","content":"hi"}],"max_tokens":"5"}',
    ],
    "POST /v1/responses": [
        b'{"model":"svc-fast","input":"\xff\xfe"}',
        b'{"model":"svc-fast","input":"hi","x":%s}' % DEEP,
        b'{"model":"svc-fast","input":"hi","max_output_tokens":"50"}',
    ],
    "POST /v1/messages": [
        b'{"model":"svc-fast","max_tokens":9,"messages":[{"role":"user","content":"\xff\xfe"}]}',
        b'{"model":"svc-fast","max_tokens":9,"messages":[{"role":"user","content":"hi"}],'
        b'"x":%s}' % DEEP,
        b'{"model":"svc-fast","max_tokens":"9","messages":[{"role":"user","content":"hi"}]}',
    ],
    "POST /v1/messages/count_tokens": [
        b'{"model":"svc-fast","messages":[{"role":"user","content":"\xff\xfe"}]}',
        b'{"model":"svc-fast","messages":[{"role":"user","content":"hi"}],"x":%s}' % DEEP,
        b'{"model":"svc-fast","messages":[{"role":"user","content":"hi"}],"system":5}',
    ],
    "PATCH /v1/api-keys/{key_id}": [b'{"name":"\xff\xfe"}', b'{"daily_cap_credits":"5"}'],
    "POST /v1/api-keys": [
        b'{"name":"\xff\xfe","environment":"live","daily_cap_credits":null}',
        b'{"name":"k","environment":"live","daily_cap_credits":null,"x":%s}' % DEEP,
        b'{"name":"k","environment":"live","daily_cap_credits":"5"}',
    ],
    "POST /admin/v1/accounts/{pid}/api-keys": [
        b'{"name":"\xff\xfe","environment":"live","daily_cap_credits":null}',
        b'{"name":"k","environment":"test","daily_cap_credits":null,"x":%s}' % DEEP,
    ],
    "POST /admin/v1/accounts/{pid}/grants": [b'{"credits":"5"}', b'{"credits":1,"x":%s}' % DEEP],
    "POST /admin/v1/accounts/{pid}/spotlights": [
        b'{"view_id":"\xff\xfe"}',
        b'{"view_id":"v","x":%s}' % DEEP,
    ],
}
HOSTILE = [
    pytest.param(label, {"body": body}, id=f"{label}-{n}")
    for label, bodies in HOSTILE_BODIES.items()
    for n, body in enumerate(bodies)
] + [pytest.param("GET /v1/usage", {"query": {"days": "²"}}, id="GET /v1/usage-days")]


@pytest.mark.parametrize(("label", "request_parts"), HOSTILE)
def test_hostile_input_is_a_documented_400(
    server: Server,
    api_schema: BaseSchema,
    known: Known,
    label: str,
    request_parts: dict[str, Any],
) -> None:
    operation = api_schema.find_operation_by_label(label)
    assert operation is not None
    token = server.admin_token if " /admin/" in label else known.key
    media_type = {"media_type": "application/json"} if "body" in request_parts else {}
    case = operation.Case(
        headers={"Authorization": f"Bearer {token}"},
        path_parameters={
            name: value
            for name, value in (("pid", known.pid), ("key_id", known.spare_key_id))
            if f"{{{name}}}" in label
        },
        **media_type,
        **request_parts,
    )
    response = case.call_and_validate(checks=CHECKS)
    assert response.status_code == 400, response.text
    if "/v1/messages" in label:  # Anthropic's shape: no code
        assert response.json()["error"]["type"] == "invalid_request_error"
    else:
        assert response.json()["error"]["code"] == "invalid_value"
