"""Upstream attempts as the metrics count them: each failure's outcome is named where it is
seen (the HTTP client tells a 500 from a timeout from a refused connection), and a
completion records its attempts, failovers, stream, tokens and credits once each, under its
provider and alias."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import fakeredis
import pytest

from app.apis.chat import CHAT
from app.apis.dialect import Dialect
from app.apis.responses import RESPONSES
from app.completion.catalog import Alias, load_catalog
from app.completion.router import UpstreamRouter
from app.completion.service import CompletionService
from app.completion.settlement import drain_background
from app.core.errors import UpstreamError, UpstreamOutcome
from app.core.metrics import METRICS, exposition
from app.http.rsgi.exchange import RSGIExchange
from app.http.streams import serve_stream
from app.kv.layout import KeySpace
from app.runtime import Services
from app.upstream.base import Piece, Provider, UpstreamCall, Usage
from app.upstream.config import ProviderConfig
from app.upstream.http11 import StreamingProvider
from app.upstream.simulated import SimulatedProvider
from bench.mock_upstream import MockUpstream
from tests.conftest import Clock
from tests.e2e.conftest import Samples, metric_samples
from tests.support.ledgers import Ledgers
from tests.support.rsgi_transport import FakeHeaders, FakeProtocol, FakeScope
from tests.support.scripts_helpers import account, key
from tests.support.upstream_helpers import stream_services, upstream_call

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _outcome(base_url: str, model: str = "m", **limits: float) -> UpstreamOutcome:
    """The outcome of the UpstreamError one streamed call to ``base_url`` fails with."""
    config = ProviderConfig(base_url=base_url, **limits)  # type: ignore[arg-type]
    provider = StreamingProvider(config)
    try:
        with pytest.raises(UpstreamError) as failure:
            async for _batch in provider.stream(upstream_call(model)):
                pass
    finally:
        await provider.close()
    return failure.value.outcome


@pytest.mark.parametrize(
    ("model", "outcome"),
    [
        ("m-fail500", "5xx"),  # was counted as a connect failure
        ("m-fail429", "4xx"),
        ("m-fail400", "4xx"),  # the client's error (no failover), an attempt all the same
        ("m-refuse", "connect_error"),  # closed without a response
        ("m-drop3", "stream_error"),  # mid-stream
    ],
)
async def test_the_mock_s_faults_have_their_outcomes(
    mock: MockUpstream, model: str, outcome: str
) -> None:
    assert await _outcome(mock.base_url, model) == outcome


async def test_timeouts_are_timeouts_before_and_after_the_first_token(mock: MockUpstream) -> None:
    assert await _outcome(mock.base_url, "m-stall", first_byte_timeout_s=0.2) == "timeout"
    assert await _outcome(mock.base_url, "m-stallafter2", idle_timeout_s=0.2) == "timeout"


async def test_an_unreachable_upstream_is_a_connect_error() -> None:
    assert await _outcome("http://127.0.0.1:9/v1", connect_timeout_s=1) == "connect_error"


async def _raw(handler: Handler) -> tuple[asyncio.Server, str]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        # the error's body never ends: still the status it answered with
        (b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 100\r\n\r\n{", "5xx"),
        (b"HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\ncontent-length: 0\r\n\r\n", "3xx"),
        (b"HTTP/1.1 204 No Content\r\n\r\n", "stream_error"),  # no stream to relay
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "stream_error"),  # not HTTP at all
    ],
)
async def test_what_a_raw_answer_is_counted_as(answer: bytes, outcome: str) -> None:
    async def handler(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(answer)
        await writer.drain()

    server, base_url = await _raw(handler)
    try:
        assert await _outcome(base_url, first_byte_timeout_s=2) == outcome
    finally:
        server.close()
        await server.wait_closed()


# -- what one completion records


class _Reporting:
    """A provider whose usage report names cached and reasoning tokens."""

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        yield ["one ", "two "]
        yield [Usage(9, 2, {"cached_tokens": 6}, {"reasoning_tokens": 1, "audio_tokens": 0})]

    async def close(self) -> None:
        pass


def _aliases(tmp_path: Path, base_url: str) -> dict[str, Alias]:
    path = tmp_path / "models.toml"
    upstreams = ", ".join(
        f'{{ provider = "mock", model = "m-{fault}" }}' for fault in ("fail500", "refuse", "good")
    )
    path.write_text(
        f'[providers.mock]\nbase_url = "{base_url}"\n'
        f'[providers.reporting]\nbase_url = "{base_url}"\n'
        f"[aliases.svc-code]\nupstreams = [{upstreams}]\n"
        '[aliases.svc-fast]\nupstreams = [{ provider = "reporting", model = "r" }]\n'
    )
    return load_catalog(path).aliases


async def _samples() -> Samples:
    async def no_redis() -> None:
        return None

    return metric_samples((await exposition(METRICS, no_redis)).decode())


def _delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    sample = (name, tuple(sorted(labels.items())))
    return after.get(sample, 0.0) - before.get(sample, 0.0)


async def _serve(api: Dialect, body: bytes, services: Services) -> bytes:
    scope = FakeScope("POST", api.path, FakeHeaders([("content-length", str(len(body)))]))
    protocol = FakeProtocol([body])
    await serve_stream(api, services, RSGIExchange(scope, protocol), "req_metrics")
    await drain_background()
    assert protocol.response.result().status == 200
    return b"".join(chunk for chunk in protocol.stream.chunks if chunk)


async def test_a_completion_records_each_attempt_its_failovers_stream_tokens_and_credits(
    mock: MockUpstream, tmp_path: Path, clock: Clock
) -> None:
    redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    ledger = Ledgers(redis, KeySpace("svc", 64), cap_ttl_s=172_800, usage_ttl_s=86_400)
    await account(ledger, "acct_M", purchased=100_000)
    ident = await key(ledger, "acct_M", "kidM00000000")
    mock_provider = StreamingProvider(ProviderConfig(base_url=mock.base_url))
    providers: dict[str, Provider] = {"mock": mock_provider, "reporting": _Reporting()}
    router = UpstreamRouter(providers, SimulatedProvider())
    service = CompletionService(ledger.holds, router, deadline_s=900, clock=clock)
    services = stream_services(service, ident, _aliases(tmp_path, mock.base_url))
    before = await _samples()
    try:
        chat = b'{"model":"svc-code","messages":[{"role":"user","content":"hi"}]}'
        assert b"[DONE]" in await _serve(CHAT, chat, services)
        responses = b'{"model":"svc-fast","input":"hi"}'
        assert b"response.completed" in await _serve(RESPONSES, responses, services)
    finally:
        await mock_provider.close()
        await redis.aclose()
    after = await _samples()

    def delta(name: str, **labels: str) -> float:
        return _delta(after, before, name, **labels)

    # svc-code: a 500, a refused connection, then the good one
    for outcome, count in (("5xx", 1), ("connect_error", 1), ("2xx", 1), ("timeout", 0)):
        assert delta("svc_upstream_attempts_total", provider="mock", outcome=outcome) == count
    first = {"provider": "mock", "phase": "first_token"}
    assert delta("svc_upstream_errors_total", outcome="5xx", **first) == 1
    assert delta("svc_upstream_errors_total", outcome="connect_error", **first) == 1
    assert delta("svc_upstream_failovers_total", model="svc-code") == 2
    assert delta("svc_upstream_attempts_total", provider="reporting", outcome="2xx") == 1

    for route, model in ((CHAT.path, "svc-code"), (RESPONSES.path, "svc-fast")):
        answered = {"route": route, "status": "200", "model": model}
        assert delta("svc_requests_total", **answered) == 1
        assert delta("svc_time_to_first_byte_seconds_count", route=route, model=model) == 1
        assert delta("svc_request_duration_seconds_count", route=route, model=model) == 1
    # the mock reports 20 output tokens; the reporting provider its own numbers and details
    assert delta("svc_tokens_total", model="svc-code", direction="output") == 20
    assert delta("svc_tokens_total", model="svc-fast", direction="input") == 9
    assert delta("svc_tokens_total", model="svc-fast", direction="output") == 2
    assert delta("svc_token_details_total", model="svc-fast", detail="cached_tokens") == 6
    assert delta("svc_token_details_total", model="svc-fast", detail="reasoning_tokens") == 1
    for model in ("svc-code", "svc-fast"):
        live = {"environment": "live", "model": model}
        reserved = delta("svc_credits_total", movement="reserved", **live)
        settled = delta("svc_credits_total", movement="settled", **live)
        refunded = delta("svc_credits_total", movement="refunded", **live)
        assert reserved == settled + refunded > 0
        assert settled > 0
    assert delta("svc_settlements_total", outcome="completed") == 2
