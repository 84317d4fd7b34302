"""The spans of a completion, recorded by the SDK's in-memory exporter: the request's span
(SERVER, continuing the client's W3C trace context) over reserve, one span per upstream
attempt (CLIENT, whose request carried the trace context) and settle; what each tells; the
failures; and that no span carries a prompt, a completion, a key or an account.

Served in process as granian would (``Gateway`` over the faked RSGI objects), by services
built as a worker builds them, against the mock upstream in process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fakeredis
import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from app.accounts.bodies import KeyCreateRequest
from app.completion.service import CompletionService
from app.completion.traced import TracedCompletionService
from app.core import tracing
from app.core.settings import Settings
from app.core.tracing import otel
from app.http.app import create_app
from app.http.rsgi.gateway import Gateway
from app.runtime import Services
from app.store import Store
from bench.mock_upstream import MockUpstream
from tests.support.rsgi_transport import RSGITransport

# the Litestar app's own (its routes' dependencies), as in the other suites that build it
pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
TRACESTATE = "vendor=opaque-value"
PROMPT = "the launch code is octopus-7731"
PROVIDER_KEY = "sk-provider-key-4411"
PROVIDER_KEY_VAR = "SVC_TEST_TRACED_PROVIDER_KEY"
HIDDEN_MODEL = "hidden-upstream-model"
COMPLETION_WORDS = ("alpha", "bravo", "charlie", "foxtrot")  # what the mock replies with
MODELS = {
    "svc-fast": [HIDDEN_MODEL],
    "svc-code": ["code-fail500", HIDDEN_MODEL],  # the first fails: a failover
    "svc-smart": ["smart-fail500"],  # every upstream fails: 502
}


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Traces on in this process, every span kept in memory as it ends."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=otel.resource(), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "ACTIVE", otel.Tracing(provider))
    yield exporter
    provider.shutdown()


@dataclass
class Svc:
    client: httpx.AsyncClient
    services: Services
    mock: MockUpstream
    key: str
    kid: str
    pid: str
    broke: str  # a key of an account with no credits


def models_file(path: Path, base_url: str, aliases: dict[str, list[str]]) -> Path:
    lines = ["[providers.mock]", f'base_url = "{base_url}"', f'api_key_env = "{PROVIDER_KEY_VAR}"']
    for alias, models in aliases.items():
        refs = ", ".join(f'{{ provider = "mock", model = "{m}" }}' for m in models)
        lines += [f"[aliases.{alias}]", f"upstreams = [{refs}]"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
async def svc(
    tmp_path: Path,
    store: Store,
    mock: MockUpstream,
    spans: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Svc]:
    """A worker's services and app, built with traces on, serving through ``Gateway``."""
    monkeypatch.setenv(PROVIDER_KEY_VAR, PROVIDER_KEY)
    settings = Settings(
        data_dir=str(tmp_path),
        models_file=str(models_file(tmp_path / "models.toml", mock.base_url, MODELS)),
        redis_url="redis://in-process.invalid",  # never dialled: fakeredis is passed in
        database_url=f"sqlite:///{tmp_path / 'svc.db'}",  # the `store` fixture's file
        key_pepper="test-pepper",
        admin_token="test-admin-token",
    )
    services = Services(settings, fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()), store)
    app = create_app(settings)
    app.state.services = services  # what the lifespan does; it is not run here
    accounts = services.accounts
    pid = await accounts.create_account()
    await accounts.grant_purchased(pid, 100_000, source="test")
    live = await services.api_keys.create_key(
        pid, KeyCreateRequest(name="live", environment="live", daily_cap_credits=None)
    )
    poor = await accounts.create_account()
    broke = await services.api_keys.create_key(
        poor, KeyCreateRequest(name="broke", environment="live", daily_cap_credits=None)
    )
    client = httpx.AsyncClient(transport=RSGITransport(Gateway(app)), base_url="http://svc")
    spans.clear()  # what setting up made (nothing traced, but be sure)
    try:
        yield Svc(client, services, mock, live.key, live.id, pid, broke.key)
    finally:
        await client.aclose()
        await services.close()  # a worker that stops: its tracing too


async def complete(
    svc: Svc,
    alias: str = "svc-fast",
    *,
    key: str | None = None,
    path: str = "/v1/chat/completions",
    traceparent: str | None = TRACEPARENT,
    **extra: Any,
) -> httpx.Response:
    headers = {"authorization": f"Bearer {key or svc.key}"}
    if traceparent is not None:
        headers |= {"traceparent": traceparent, "tracestate": TRACESTATE}
    if path == "/v1/responses":
        body: dict[str, Any] = {"model": alias, "input": PROMPT, "stream": True, **extra}
    else:
        body = {"model": alias, "messages": [{"role": "user", "content": PROMPT}], **extra}
    return await svc.client.post(path, json=body, headers=headers)


def by_name(spans: Sequence[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def chunks(response: httpx.Response) -> list[dict[str, Any]]:
    data = [line[6:] for line in response.text.split("\n") if line.startswith("data: {")]
    return [json.loads(line) for line in data]


def every_value(spans: Sequence[ReadableSpan]) -> list[str]:
    """Everything a span tells, as text: names, attributes, events, links, the resource."""
    values: list[str] = []
    for span in spans:
        values.append(span.name)
        values += [f"{k}={v}" for k, v in attributes(span).items()]
        values += [f"{k}={v}" for k, v in span.resource.attributes.items()]
        for event in span.events:
            values.append(event.name)
            values += [f"{k}={v}" for k, v in (event.attributes or {}).items()]
        values += [f"{k}={v}" for link in span.links for k, v in (link.attributes or {}).items()]
    return values


def tells_no_secret(svc: Svc, spans: Sequence[ReadableSpan]) -> None:
    secrets = [
        svc.key,
        svc.key.split("_")[-1],  # the key's secret part alone
        svc.kid,
        svc.pid,
        svc.broke,
        PROMPT,
        "octopus",
        PROVIDER_KEY,
        HIDDEN_MODEL,
        "fail500",  # a part of the upstreams' model names
        svc.mock.base_url,
        *COMPLETION_WORDS,
    ]
    told = "\n".join(every_value(spans)).lower()
    assert [secret for secret in secrets if secret.lower() in told] == []


async def test_a_completion_is_a_server_span_over_reserve_upstream_and_settle(
    svc: Svc, spans: InMemorySpanExporter
) -> None:
    response = await complete(
        svc, max_tokens=50, temperature=0.3, stream_options={"include_usage": True}
    )
    assert response.status_code == 200
    sent = chunks(response)
    finished = spans.get_finished_spans()
    named = by_name(finished)
    assert sorted(named) == ["chat svc-fast", "reserve", "settle", "upstream mock"]
    assert all(len(group) == 1 for group in named.values())
    (request,), (reserve,) = named["chat svc-fast"], named["reserve"]
    (upstream,), (settle,) = named["upstream mock"], named["settle"]

    # the client's trace goes on: same trace, its span the parent of svc's
    assert request.kind is SpanKind.SERVER
    assert f"{request.context.trace_id:032x}" == TRACE_ID
    assert request.parent is not None
    assert request.parent.is_remote
    assert f"{request.parent.span_id:016x}" == PARENT_ID
    for child in (reserve, upstream, settle):
        assert child.parent is not None
        assert child.parent.span_id == request.context.span_id
        assert child.context.trace_id == request.context.trace_id
        assert child.kind is SpanKind.CLIENT
    assert reserve.end_time <= upstream.start_time  # type: ignore[operator]
    assert upstream.end_time <= settle.end_time <= request.end_time  # type: ignore[operator]

    # the request: what was asked, served and charged
    told = attributes(request)
    metadata = sent[-1]["svc"]
    usage = next(chunk["usage"] for chunk in sent if chunk.get("usage"))
    assert told == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "svc-fast",
        "gen_ai.response.model": "svc-fast",  # the alias, never the upstream's model
        "gen_ai.response.id": sent[0]["id"],
        "gen_ai.request.max_tokens": 50,
        "gen_ai.request.temperature": 0.3,
        "gen_ai.request.top_p": 1.0,  # the default svc sends upstream
        "gen_ai.usage.input_tokens": usage["prompt_tokens"],
        "gen_ai.usage.output_tokens": usage["completion_tokens"],
        "http.request.method": "POST",
        "http.route": "/v1/chat/completions",
        "http.response.status_code": 200,
        "svc.api": "chat",
        "svc.environment": "live",
        "svc.request_id": response.headers["x-request-id"],
        "svc.outcome": "completed",
        "svc.credits.reserved": told["svc.credits.reserved"],
        "svc.credits.charged": metadata["credits_used"],
        "svc.usage.source": "upstream",
        "svc.time_to_first_output_ms": told["svc.time_to_first_output_ms"],
        "svc.upstream.attempts": 1,
    }
    assert told["svc.credits.reserved"] > metadata["credits_used"] > 0
    assert request.status.status_code is StatusCode.UNSET

    # the scripts and the upstream
    assert attributes(reserve) == {
        "db.system.name": "redis",
        "db.operation.name": "EVALSHA",
        "db.stored_procedure.name": "reserve",
        "svc.credits.reserved": told["svc.credits.reserved"],
    }
    assert attributes(settle)["db.stored_procedure.name"] == "settle"
    assert attributes(settle)["svc.script.status"] == "ok"
    assert attributes(upstream) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "mock",
        "server.address": "127.0.0.1",
        "server.port": svc.mock.port,
        "http.response.status_code": 200,
        "svc.upstream.attempt": 1,
    }

    # what went upstream named the attempt's span as its parent, in the client's trace
    headers = svc.mock.stats.last_headers
    assert headers["traceparent"] == f"00-{TRACE_ID}-{upstream.context.span_id:016x}-01"
    assert headers["tracestate"] == TRACESTATE
    assert headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    tells_no_secret(svc, finished)


async def test_a_request_without_a_trace_context_starts_a_trace(
    svc: Svc, spans: InMemorySpanExporter
) -> None:
    assert (await complete(svc, traceparent=None)).status_code == 200
    (request,) = by_name(spans.get_finished_spans())["chat svc-fast"]
    assert request.parent is None
    traceparent = svc.mock.stats.last_headers["traceparent"]
    assert traceparent.split("-")[1] == f"{request.context.trace_id:032x}"
    assert "tracestate" not in svc.mock.stats.last_headers


@pytest.mark.parametrize(
    "traceparent", ["00-zz-1-01", "00-" + "0" * 32 + "-" + PARENT_ID + "-01", "junk"]
)
async def test_a_malformed_trace_context_is_ignored(
    svc: Svc, spans: InMemorySpanExporter, traceparent: str
) -> None:
    assert (await complete(svc, traceparent=traceparent)).status_code == 200
    (request,) = by_name(spans.get_finished_spans())["chat svc-fast"]
    assert request.parent is None
    assert f"{request.context.trace_id:032x}" != "0" * 32


async def test_a_trace_the_client_does_not_sample_is_recorded_by_none_but_goes_on(
    svc: Svc, spans: InMemorySpanExporter
) -> None:
    """The default sampler follows the parent's decision: nothing is recorded, and the
    upstream is still told the trace (not sampled)."""
    response = await complete(svc, traceparent=f"00-{TRACE_ID}-{PARENT_ID}-00")
    assert response.status_code == 200
    assert spans.get_finished_spans() == ()
    _, trace_id, _, flags = svc.mock.stats.last_headers["traceparent"].split("-")
    assert (trace_id, flags) == (TRACE_ID, "00")


async def test_a_responses_api_request_says_so(svc: Svc, spans: InMemorySpanExporter) -> None:
    response = await complete(svc, path="/v1/responses")
    assert response.status_code == 200
    (request,) = by_name(spans.get_finished_spans())["chat svc-fast"]
    told = attributes(request)
    assert told["svc.api"] == "responses"
    assert told["http.route"] == "/v1/responses"
    assert str(told["gen_ai.response.id"]).startswith("resp_")
    assert told["svc.outcome"] == "completed"
    assert "gen_ai.request.max_tokens" not in told  # the client set none
    tells_no_secret(svc, spans.get_finished_spans())


async def test_a_failover_is_an_attempt_span_each(svc: Svc, spans: InMemorySpanExporter) -> None:
    assert (await complete(svc, "svc-code")).status_code == 200
    finished = spans.get_finished_spans()
    (request,) = by_name(finished)["chat svc-code"]
    first, second = sorted(by_name(finished)["upstream mock"], key=lambda s: s.start_time or 0)
    assert attributes(first)["svc.upstream.attempt"] == 1
    assert attributes(first)["http.response.status_code"] == 500
    assert attributes(first)["error.type"] == "5xx"
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description is None
    assert attributes(second)["svc.upstream.attempt"] == 2
    assert attributes(second)["http.response.status_code"] == 200
    assert second.status.status_code is StatusCode.UNSET
    assert attributes(request)["svc.upstream.attempts"] == 2
    assert request.status.status_code is StatusCode.UNSET  # served after all
    # what each attempt sent named its own span
    assert svc.mock.stats.last_headers["traceparent"].split("-")[2] == (
        f"{second.context.span_id:016x}"
    )
    tells_no_secret(svc, finished)


async def test_upstreams_that_all_fail_fail_the_request_span(
    svc: Svc, spans: InMemorySpanExporter
) -> None:
    response = await complete(svc, "svc-smart")
    assert response.status_code == 502
    finished = spans.get_finished_spans()
    named = by_name(finished)
    (request,) = named["chat svc-smart"]
    assert request.status.status_code is StatusCode.ERROR
    told = attributes(request)
    assert told["error.type"] == response.json()["error"]["code"]
    assert told["http.response.status_code"] == 502
    assert told["svc.outcome"] == "released"  # the hold was released whole
    assert told["svc.credits.charged"] == 0
    (attempt,) = named["upstream mock"]
    assert attributes(attempt)["error.type"] == "5xx"
    assert "settle" in named
    tells_no_secret(svc, finished)


async def test_a_refusal_names_its_error_and_is_the_clients(
    svc: Svc, spans: InMemorySpanExporter
) -> None:
    response = await complete(svc, key=svc.broke)
    assert response.status_code == 402
    finished = spans.get_finished_spans()
    named = by_name(finished)
    assert sorted(named) == ["chat svc-fast", "reserve"]  # no upstream was asked
    (request,), (reserve,) = named["chat svc-fast"], named["reserve"]
    assert attributes(reserve)["svc.refusal"] == "insufficient_credits"
    assert attributes(request)["error.type"] == "insufficient_credits"
    assert attributes(request)["http.response.status_code"] == 402
    # a 4xx is the client's error: the server's span is not failed (HTTP conventions)
    assert request.status.status_code is StatusCode.UNSET
    tells_no_secret(svc, finished)


async def test_a_bad_key_is_a_span_named_for_no_model(
    svc: Svc, spans: InMemorySpanExporter
) -> None:
    response = await complete(svc, key="svc_live_" + "x" * 40)
    assert response.status_code == 401
    (request,) = spans.get_finished_spans()
    assert request.name == "chat"  # the body was never read
    assert attributes(request)["error.type"] == "invalid_api_key"
    assert f"{request.context.trace_id:032x}" == TRACE_ID
    assert "svc_live_" not in "\n".join(every_value([request]))


async def test_a_client_that_leaves_is_settled_before_its_span_ends(
    svc: Svc, spans: InMemorySpanExporter
) -> None:
    headers = {"authorization": f"Bearer {svc.key}", "traceparent": TRACEPARENT}
    body = {"model": "svc-fast", "messages": [{"role": "user", "content": PROMPT}]}
    svc.mock.options.delay_ms = 20  # 20 chunks, 20 ms apart
    async with svc.client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
        async for _ in r.aiter_bytes():
            break  # the first chunk, then the client hangs up
    named = by_name(spans.get_finished_spans())
    (request,), (settle,) = named["chat svc-fast"], named["settle"]
    told = attributes(request)
    assert told["svc.outcome"] == "client_disconnect"
    assert 0 < told["svc.credits.charged"] < told["svc.credits.reserved"]
    assert request.status.status_code is StatusCode.UNSET  # the client's doing
    assert settle.end_time <= request.end_time  # type: ignore[operator]


async def test_a_stream_the_upstream_cuts_fails_its_spans(
    svc: Svc, spans: InMemorySpanExporter
) -> None:
    svc.mock.options.fault = "drop-after:3"
    response = await complete(svc)
    assert response.status_code == 200  # the stream had begun: it ends with an error event
    named = by_name(spans.get_finished_spans())
    (request,), (attempt,) = named["chat svc-fast"], named["upstream mock"]
    assert attributes(request)["svc.outcome"] == "upstream_error"
    assert attributes(request)["error.type"] == "upstream_error"
    assert request.status.status_code is StatusCode.ERROR
    assert attributes(attempt)["error.type"] == "stream_error"
    assert attributes(attempt)["http.response.status_code"] == 200  # it had answered


async def test_traces_off_send_no_trace_context_and_record_nothing(
    tmp_path: Path, store: Store, mock: MockUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "ACTIVE", None)
    monkeypatch.setenv(PROVIDER_KEY_VAR, PROVIDER_KEY)
    settings = Settings(
        data_dir=str(tmp_path),
        models_file=str(models_file(tmp_path / "models.toml", mock.base_url, MODELS)),
        redis_url="redis://in-process.invalid",
        database_url=f"sqlite:///{tmp_path / 'svc.db'}",
        key_pepper="test-pepper",
        admin_token="test-admin-token",
    )
    services = Services(settings, fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()), store)
    assert type(services.completions) is CompletionService  # the plain one, chosen once
    app = create_app(settings)
    app.state.services = services
    pid = await services.accounts.create_account()
    await services.accounts.grant_purchased(pid, 100_000, source="test")
    created = await services.api_keys.create_key(
        pid, KeyCreateRequest(name="live", environment="live", daily_cap_credits=None)
    )
    async with httpx.AsyncClient(transport=RSGITransport(Gateway(app)), base_url="http://svc") as c:
        body = {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}
        headers = {"authorization": f"Bearer {created.key}", "traceparent": TRACEPARENT}
        assert (await c.post("/v1/chat/completions", json=body, headers=headers)).is_success
    await services.close()
    assert exporter.get_finished_spans() == ()
    assert "traceparent" not in mock.stats.last_headers
    assert mock.stats.last_headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    provider.shutdown()


async def test_a_worker_with_traces_on_builds_traced_completions_and_stops_them(
    svc: Svc,
) -> None:
    assert isinstance(svc.services.completions, TracedCompletionService)
    assert svc.services.completions.upstreams == {"mock": ("127.0.0.1", svc.mock.port)}
    await svc.services.close()
    assert tracing.ACTIVE is None


async def test_an_idempotent_replay_is_a_reserve_that_says_so(
    svc: Svc, spans: InMemorySpanExporter
) -> None:
    headers = {"authorization": f"Bearer {svc.key}", "idempotency-key": "traced-once"}
    body = {"model": "svc-fast", "messages": [{"role": "user", "content": PROMPT}]}
    first = await svc.client.post("/v1/chat/completions", json=body, headers=headers)
    spans.clear()
    again = await svc.client.post("/v1/chat/completions", json=body, headers=headers)
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    named = by_name(spans.get_finished_spans())
    assert sorted(named) == ["chat svc-fast", "reserve"]  # nothing asked upstream, nothing settled
    assert attributes(named["reserve"][0])["svc.idempotent_replay"] is True
    assert attributes(named["chat svc-fast"][0])["http.response.status_code"] == 200
    tells_no_secret(svc, spans.get_finished_spans())
