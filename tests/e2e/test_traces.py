"""Traces on a real server: ``svc serve`` with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set exports its
spans as OTLP over HTTP/protobuf to a receiver this test runs; a completion sent with a W3C
``traceparent`` is a span of the client's trace over reserve, the upstream attempt and
settle; the upstream (the mock, in a process of its own) was sent the same trace; and no
span or resource attribute carries a key, an account, the prompt or the completion."""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.e2e

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
PROMPT = "the vault combination is walrus-5120"
PROVIDER_KEY = "sk-mock-provider-key-9931"
HIDDEN_MODEL = "hidden-upstream-model"


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP receiver: every ``POST /v1/traces`` decoded and kept."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def spans(self) -> list[tuple[dict[str, Any], Span]]:
        """Every span received, with its resource's attributes."""
        with self.lock:
            return [
                (attributes(resource_spans.resource.attributes), span)
                for request in self.requests
                for resource_spans in request.resource_spans
                for scope_spans in resource_spans.scope_spans
                for span in scope_spans.spans
            ]


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # http.server's name for it
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        with self.server.lock:
            self.server.paths.append(self.path)
            self.server.requests.append(request)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no line per export on the test's stderr


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


def attributes(pairs: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        found[pair.key] = value(pair.value)
    return found


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def mock() -> Iterator[MockProcess]:
    process = start_in_subprocess(chunks=12)
    yield process
    process.stop()


def serve_traced(
    tmp: Path, receiver: Receiver, mock: MockProcess, schedule_delay_ms: int
) -> Server:
    """``svc serve`` (2 workers) exporting to ``receiver``, its batches sent every
    ``schedule_delay_ms``, the alias svc-fast served by ``mock``."""
    models = tmp / "models.toml"
    models.write_text(
        "\n".join(
            [
                "[providers.mock]",
                f'base_url = "{mock.base_url}"',
                'api_key_env = "MOCK_API_KEY"',
                "[aliases.svc-fast]",
                f'upstreams = [{{ provider = "mock", model = "{HIDDEN_MODEL}" }}]',
            ]
        )
        + "\n"
    )
    return start_server(
        tmp,
        workers=2,
        extra_env={
            "SVC_MODELS_FILE": str(models),
            "MOCK_API_KEY": PROVIDER_KEY,
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": str(schedule_delay_ms),
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=e2e",
        },
    )


@pytest.fixture(scope="module")
def traced(
    tmp_path_factory: pytest.TempPathFactory, receiver: Receiver, mock: MockProcess
) -> Iterator[Server]:
    srv = serve_traced(tmp_path_factory.mktemp("traced"), receiver, mock, 100)
    yield srv
    stop_server(srv.process)


def _wait_for(receiver: Receiver, trace_id: str, count: int) -> list[tuple[dict[str, Any], Span]]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = [(res, span) for res, span in receiver.spans() if span.trace_id.hex() == trace_id]
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{len(found)} of {count} spans arrived: {[s.name for _, s in found]}")


def test_a_completion_is_exported_in_the_clients_trace_and_tells_no_secret(
    traced: Server, receiver: Receiver, mock: MockProcess
) -> None:
    pid = traced.new_account(100_000)
    created = traced.admin(
        "POST",
        f"/accounts/{pid}/api-keys",
        {"name": "traced", "environment": "live", "daily_cap_credits": None},
    ).json()
    key, kid = created["key"], created["id"]
    response = httpx.post(
        f"{traced.base_url}/chat/completions",
        json={"model": "svc-fast", "messages": [{"role": "user", "content": PROMPT}]},
        headers={
            "authorization": f"Bearer {key}",
            "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
            "tracestate": "client=7",
        },
        timeout=30,
    )
    assert response.status_code == 200
    events = [line[6:] for line in response.text.split("\n") if line.startswith("data: {")]
    metadata = json.loads(events[-1])["svc"]
    completion = "".join(
        choice["delta"].get("content") or ""
        for event in events
        for choice in json.loads(event).get("choices", [])
    )
    assert completion

    found = _wait_for(receiver, TRACE_ID, 4)
    assert set(receiver.paths) == {"/v1/traces"}  # the endpoint's signal path, added by the SDK
    spans = {span.name: span for _, span in found}
    assert sorted(spans) == ["chat svc-fast", "reserve", "settle", "upstream mock"]
    request = spans["chat svc-fast"]
    assert request.kind == Span.SPAN_KIND_SERVER
    assert request.parent_span_id.hex() == PARENT_ID
    for name in ("reserve", "upstream mock", "settle"):
        assert spans[name].parent_span_id == request.span_id
        assert spans[name].kind == Span.SPAN_KIND_CLIENT
    told = attributes(request.attributes)
    assert told["gen_ai.operation.name"] == "chat"
    assert told["gen_ai.request.model"] == told["gen_ai.response.model"] == "svc-fast"
    assert told["svc.outcome"] == "completed"
    assert told["svc.api"] == "chat"
    assert told["svc.environment"] == "live"
    assert told["svc.credits.charged"] == metadata["credits_used"]
    assert told["svc.credits.reserved"] >= metadata["credits_used"]
    assert told["gen_ai.usage.output_tokens"] == 12
    assert told["http.response.status_code"] == 200
    assert request.status.code == Status.STATUS_CODE_UNSET
    upstream = attributes(spans["upstream mock"].attributes)
    assert (upstream["server.address"], upstream["server.port"]) == ("127.0.0.1", mock.port)
    assert upstream["gen_ai.provider.name"] == "mock"
    assert upstream["http.response.status_code"] == 200

    # what the upstream was sent continues the same trace, under the attempt's span
    stats = httpx.get(mock.base_url.removesuffix("/v1") + "/_stats").json()
    sent = stats["last_headers"]
    assert sent["traceparent"] == f"00-{TRACE_ID}-{spans['upstream mock'].span_id.hex()}-01"
    assert sent["tracestate"] == "client=7"

    resource = found[0][0]
    assert resource["service.name"] == "svc"
    assert resource["deployment.environment.name"] == "e2e"

    # nothing secret, in any span's attributes, events or resource
    told_text = "\n".join(
        f"{span.name} {attributes(span.attributes)} {resource}"
        + "".join(f"{e.name} {attributes(e.attributes)}" for e in span.events)
        for resource, span in receiver.spans()
    ).lower()
    secrets = [
        key,
        kid,
        pid,
        traced.admin_token,
        PROMPT,
        "walrus",
        PROVIDER_KEY,
        HIDDEN_MODEL,
        mock.base_url,
        *completion.split(),
    ]
    assert [s for s in secrets if s.lower() in told_text] == []


def test_a_responses_request_is_traced_as_the_responses_api(
    traced: Server, receiver: Receiver
) -> None:
    trace_id = "1f" * 16
    response = httpx.post(
        f"{traced.base_url}/responses",
        json={"model": "svc-fast", "input": PROMPT, "stream": True},
        headers={
            "authorization": f"Bearer {traced.dev_key}",
            "traceparent": f"00-{trace_id}-{PARENT_ID}-01",
        },
        timeout=30,
    )
    assert response.status_code == 200
    spans = {span.name: span for _, span in _wait_for(receiver, trace_id, 4)}
    told = attributes(spans["chat svc-fast"].attributes)
    assert told["svc.api"] == "responses"
    assert str(told["gen_ai.response.id"]).startswith("resp_")


def test_the_server_logs_no_export_failure(traced: Server) -> None:
    warnings = [
        entry
        for entry in traced.log_entries()
        if entry.get("level") in ("WARNING", "ERROR") and "opentelemetry" in entry.get("logger", "")
    ]
    assert warnings == []


def test_a_worker_that_stops_exports_what_it_still_held(
    tmp_path: Path, receiver: Receiver, mock: MockProcess
) -> None:
    """Batches every 10 minutes: the spans of a completion go out when the server stops."""
    trace_id = "2e" * 16
    srv = serve_traced(tmp_path, receiver, mock, 600_000)
    try:
        response = httpx.post(
            f"{srv.base_url}/chat/completions",
            json={"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]},
            headers={
                "authorization": f"Bearer {srv.dev_key}",
                "traceparent": f"00-{trace_id}-{PARENT_ID}-01",
            },
            timeout=30,
        )
        assert response.status_code == 200
        time.sleep(0.3)
        assert [s for _, s in receiver.spans() if s.trace_id.hex() == trace_id] == []
    finally:
        stop_server(srv.process)
    assert srv.process.returncode == 0
    spans = {span.name for _, span in _wait_for(receiver, trace_id, 4)}
    assert spans == {"chat svc-fast", "reserve", "upstream mock", "settle"}
