"""svc as a real proxy: relay, failover, sanitizing and the 502 contract, against the mock
upstream running as a real HTTP server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import ROOT, Server, free_port, start_server, stop_server

pytestmark = pytest.mark.e2e

SECRET_MODEL = "fast-secret-model-ignoremax"


def models_file(
    path: Path, base_url: str, aliases: dict[str, list[str]], **provider: object
) -> Path:
    lines = [
        "[providers.mock]",
        f'base_url = "{base_url}"',
        'api_key_env = "MOCK_API_KEY"',
        *(f"{k} = {json.dumps(v)}" for k, v in provider.items()),
    ]
    for alias, models in aliases.items():
        refs = ", ".join(f'{{ provider = "mock", model = "{m}" }}' for m in models)
        lines += ["", f"[aliases.{alias}]", f"upstreams = [{refs}]"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def mock() -> Iterator[MockProcess]:
    process = start_in_subprocess(chunks=20)
    yield process
    process.stop()


def _server(
    tmp: Path, mock: MockProcess, aliases: dict[str, list[str]], **provider: object
) -> Server:
    path = models_file(tmp / "models.toml", mock.base_url, aliases, **provider)
    return start_server(
        tmp, extra_env={"SVC_MODELS_FILE": str(path), "MOCK_API_KEY": "mock-provider-key"}
    )


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory, mock: MockProcess) -> Iterator[Server]:
    srv = _server(
        tmp_path_factory.mktemp("proxy"),
        mock,
        {
            "svc-fast": [SECRET_MODEL],
            "svc-code": ["code-fail500", "code-stall", "code-refuse", "code-good"],
            "svc-smart": ["smart-fail429", "smart-refuse"],
        },
        first_byte_timeout_s=1.0,
    )
    yield srv
    stop_server(srv.process)


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory, mock: MockProcess) -> Iterator[Server]:
    srv = _server(
        tmp_path_factory.mktemp("faulty"),
        mock,
        {
            "svc-fast": ["fast-drop3"],
            "svc-code": ["code-fail400-secret", "code-never-tried"],
            "svc-smart": ["smart-stallafter2"],
        },
        idle_timeout_s=1.0,
    )
    yield srv
    stop_server(srv.process)


@pytest.fixture(scope="module")
def quirky(tmp_path_factory: pytest.TempPathFactory, mock: MockProcess) -> Iterator[Server]:
    srv = _server(
        tmp_path_factory.mktemp("quirky"),
        mock,
        {
            "svc-fast": ["fast-nousage"],
            "svc-code": ["code-failonce"],
            "svc-smart": ["smart-slow100"],
        },
    )
    yield srv
    stop_server(srv.process)


def _stats(mock: MockProcess) -> dict[str, object]:
    return dict(httpx.get(mock.base_url.removesuffix("/v1") + "/_stats").json())


def _chat(srv: Server, key: str, alias: str, **extra: object) -> httpx.Response:
    body = {"model": alias, "messages": [{"role": "user", "content": "hello there"}], **extra}
    return httpx.post(
        f"{srv.base_url}/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def _events(text: str) -> list[dict[str, object]]:
    events = [e for e in text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    return [json.loads(e[6:]) for e in events[:-1]]


def _content(events: list[dict[str, object]]) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content", "")  # type: ignore[index]
        for c in events
        if c.get("choices")
    )


def test_relay_forwards_the_real_model_and_charges_the_upstream_usage(
    proxy: Server, mock: MockProcess
) -> None:
    pid = proxy.new_account(100_000)
    key = proxy.new_key(pid)
    r = _chat(proxy, key, "svc-fast", temperature=0.3, top_p=0.9)
    assert r.status_code == 200
    events = _events(r.text)
    assert (
        _content(events)
        == " ".join(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"] * 3)[
            : len(_content(events))
        ]
    )
    assert {e["model"] for e in events} == {"svc-fast"}
    sent = _stats(mock)["last_request"]
    assert sent["model"] == SECRET_MODEL  # type: ignore[index]
    assert sent["stream"] is True  # type: ignore[index]
    assert sent["stream_options"] == {"include_usage": True}  # type: ignore[index]
    assert (sent["temperature"], sent["top_p"]) == (0.3, 0.9)  # type: ignore[index]
    assert sent["max_tokens"] == 4096  # type: ignore[index]
    assert _stats(mock)["last_headers"]["authorization"] == "Bearer mock-provider-key"  # type: ignore[index]
    # mock usage: prompt "hello there" = 11 // 4 + 4 = 6 tokens, 20 completion tokens
    expected = -(-(6 * 5 + 20 * 15) // 1000)
    assert events[-1]["svc"]["credits_used"] == expected  # type: ignore[index]
    assert proxy.balance(pid) == 100_000 - expected


def test_output_beyond_the_reservation_is_cut_and_not_charged(proxy: Server) -> None:
    pid = proxy.new_account(100_000)
    r = _chat(proxy, proxy.new_key(pid), "svc-fast", max_tokens=5)
    events = _events(r.text)
    content = [e for e in events if e.get("choices")]
    assert len(content) == 5  # the upstream ignored max_tokens and sent 20
    assert content[-1]["choices"][0]["finish_reason"] == "stop"  # type: ignore[index]
    assert events[-1]["svc"]["credits_used"] == -(-(6 * 5 + 5 * 15) // 1000)  # type: ignore[index]


def test_failover_respects_the_order(proxy: Server, mock: MockProcess) -> None:
    key = proxy.new_key(proxy.new_account(100_000))
    before = dict(_stats(mock)["seen_models"])  # type: ignore[arg-type]
    started = time.monotonic()
    r = _chat(proxy, key, "svc-code")
    assert r.status_code == 200
    assert {e["model"] for e in _events(r.text)} == {"svc-code"}
    seen = _stats(mock)["seen_models"]
    for model in ("code-fail500", "code-stall", "code-refuse", "code-good"):
        assert seen[model] == before.get(model, 0) + 1, model  # type: ignore[index]
    assert _stats(mock)["last_request"]["model"] == "code-good"  # type: ignore[index]
    assert time.monotonic() - started < 5  # the stall cost one first-byte timeout (1 s)


def test_failovers_are_counted_and_logged_under_the_request_id(proxy: Server) -> None:
    key = proxy.new_key(proxy.new_account(100_000))
    before = proxy.metrics()
    r = _chat(proxy, key, "svc-code")
    assert r.status_code == 200
    after = proxy.metrics()

    def delta(name: str, **labels: str) -> float:
        sample = (name, tuple(sorted(labels.items())))
        return after.get(sample, 0.0) - before.get(sample, 0.0)

    assert delta("svc_upstream_failovers_total", model="svc-code") == 3
    # each failure counted as what it was: a 500, a stall past first_byte_timeout_s, a
    # connection closed unanswered; then the upstream that served
    outcomes = {"5xx": 1, "timeout": 1, "connect_error": 1, "2xx": 1}
    for outcome, count in outcomes.items():
        assert delta("svc_upstream_attempts_total", provider="mock", outcome=outcome) == count
        if outcome != "2xx":
            first = {"provider": "mock", "phase": "first_token", "outcome": outcome}
            assert delta("svc_upstream_errors_total", **first) == count
    rid = r.headers["x-request-id"]
    mine = [e for e in proxy.log_entries() if e.get("request_id") == rid]
    assert len(mine) == 3
    assert {e["provider"] for e in mine} == {"mock"}
    assert all(e["level"] == "warning" and e["model"] == "svc-code" for e in mine)
    assert "mock-provider-key" not in (proxy.data_dir.parent / "server.log").read_text()


def test_all_upstreams_failing_is_502_and_costs_nothing(proxy: Server) -> None:
    pid = proxy.new_account(100_000)
    r = _chat(proxy, proxy.new_key(pid), "svc-smart")
    assert r.status_code == 502
    assert r.headers["x-should-retry"] == "true"
    error = r.json()["error"]
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_unavailable")
    assert "smart" not in r.text
    assert "mock" not in r.text
    assert proxy.balance(pid) == 100_000


def test_no_upstream_detail_in_1000_relayed_responses(proxy: Server) -> None:
    key = proxy.new_key(proxy.new_account(10_000_000))

    async def run() -> list[bytes]:
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            sem = asyncio.Semaphore(50)

            async def one() -> bytes:
                async with sem:
                    r = await client.post(
                        f"{proxy.base_url}/chat/completions",
                        json={"model": "svc-fast", "messages": [{"role": "user", "content": "x"}]},
                        headers={"authorization": f"Bearer {key}"},
                    )
                    head = "".join(f"{k}: {v}\n" for k, v in r.headers.items())
                    assert r.status_code == 200
                    return head.encode() + r.content

            return await asyncio.gather(*(one() for _ in range(1000)))

    responses = asyncio.run(run())
    assert len(responses) == 1000
    for raw in responses:
        lowered = raw.lower()
        for secret in (
            b"secret-model",
            b"ignoremax",
            b"fp_mock",
            b"chatcmpl-mock",
            b"mock",
            b"system_fingerprint",
            b"mock-provider-key",
        ):
            assert secret not in lowered


def test_upstream_drop_mid_stream_sends_one_error_event_and_charges_what_was_delivered(
    faulty: Server,
) -> None:
    pid = faulty.new_account(100_000)
    r = _chat(faulty, faulty.new_key(pid), "svc-fast")
    assert r.status_code == 200
    events = [e for e in r.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    payloads = [json.loads(e[6:]) for e in events[:-1]]
    errors = [p for p in payloads if "error" in p]
    assert len(errors) == 1
    assert errors[0]["error"]["code"] == "upstream_unavailable"
    content = [p for p in payloads if p.get("choices")]
    assert len(content) == 3  # the mock dropped the connection after 3 chunks
    used = payloads[-1]["svc"]["credits_used"]
    assert used == -(-(6 * 5 + 3 * 15) // 1000)  # no usage chunk arrived: the estimate
    assert faulty.balance(pid) == 100_000 - used


def test_upstream_400_is_a_sanitized_400_and_no_failover(faulty: Server, mock: MockProcess) -> None:
    pid = faulty.new_account(100_000)
    r = _chat(faulty, faulty.new_key(pid), "svc-code")
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "maximum context length" in error["message"]
    assert "fail400" not in r.text
    assert "secret" not in r.text
    assert "code-never-tried" not in _stats(mock)["seen_models"]  # type: ignore[operator]
    assert faulty.balance(pid) == 100_000


def test_idle_timeout_mid_stream(faulty: Server) -> None:
    pid = faulty.new_account(100_000)
    started = time.monotonic()
    r = _chat(faulty, faulty.new_key(pid), "svc-smart")
    assert time.monotonic() - started < 5
    payloads = [json.loads(e[6:]) for e in r.text.split("\n\n") if e and e != "data: [DONE]"]
    assert sum("error" in p for p in payloads) == 1
    assert len([p for p in payloads if p.get("choices")]) == 2
    assert faulty.balance(pid) == 100_000 - payloads[-1]["svc"]["credits_used"]


def test_estimated_usage_when_the_upstream_reports_none(quirky: Server) -> None:
    pid = quirky.new_account(100_000)
    events = _events(_chat(quirky, quirky.new_key(pid), "svc-fast").text)
    assert events[-1]["svc"]["credits_used"] == -(-(6 * 5 + 20 * 15) // 1000)  # type: ignore[index]


def test_sdk_retry_turns_a_first_502_into_a_success(quirky: Server, mock: MockProcess) -> None:
    pid = quirky.new_account(100_000)
    client = openai.OpenAI(base_url=quirky.base_url, api_key=quirky.new_key(pid))
    stream = client.chat.completions.create(
        model="svc-code", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    chunks = list(stream)
    assert chunks[-1].model_extra["svc"]["credits_used"] >= 1  # type: ignore[index]
    assert _stats(mock)["seen_models"]["code-failonce"] == 2  # type: ignore[index]


def test_client_disconnect_cancels_the_upstream(quirky: Server, mock: MockProcess) -> None:
    pid = quirky.new_account(100_000)
    before = int(_stats(mock)["client_disconnects"])  # type: ignore[arg-type]
    with httpx.stream(
        "POST",
        f"{quirky.base_url}/chat/completions",
        json={"model": "svc-smart", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {quirky.new_key(pid)}"},
        timeout=30,
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                break
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        if int(_stats(mock)["client_disconnects"]) > before:  # type: ignore[arg-type]
            break
        time.sleep(0.05)
    assert int(_stats(mock)["client_disconnects"]) == before + 1  # type: ignore[arg-type]
    spent = 100_000 - quirky.balance(pid)
    assert 1 <= spent <= 2


def test_a_slow_upstream_is_relayed_token_by_token(quirky: Server, mock: MockProcess) -> None:
    """100 ms between upstream chunks: each token is sent as it arrives, not held for the
    next one. The upstream's finish follows its last token at once: when both came in one
    read, that token carries stop; otherwise an empty closing chunk does."""
    pid = quirky.new_account(100_000)
    key = quirky.new_key(pid)
    arrivals: list[tuple[float, dict[str, object]]] = []
    body = {"model": "svc-smart", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream(
        "POST",
        f"{quirky.base_url}/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                arrivals.append((time.monotonic(), json.loads(line[6:])))
    content = [(t, e) for t, e in arrivals if e["choices"]]
    texts = [e["choices"][0]["delta"].get("content") for _, e in content]  # type: ignore[index]
    finishes = [e["choices"][0]["finish_reason"] for _, e in content]  # type: ignore[index]
    if texts[-1] == "":  # the upstream's finish came in a read of its own
        assert finishes[-2:] == [None, "stop"]
        texts, finishes = texts[:-1], [*finishes[:-2], "stop"]
    assert len(texts) == 20
    assert all(texts)
    assert finishes == [None] * 19 + ["stop"]
    assert content[0][1]["choices"][0]["delta"]["role"] == "assistant"  # type: ignore[index]
    # the first token reached the client about one upstream interval before the second
    assert content[1][0] - content[0][0] > 0.05
    assert content[19][0] - content[0][0] > 1.5
    meta = arrivals[-1][1]["svc"]
    assert meta["credits_used"] > 0  # type: ignore[index]


def test_serve_refuses_an_upstream_timeout_the_sweeper_could_cut(tmp_path: Path) -> None:
    path = models_file(
        tmp_path / "models.toml",
        "http://127.0.0.1:9/v1",
        {"svc-fast": ["m"]},
        first_byte_timeout_s=5,
        idle_timeout_s=20,
    )
    done = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--port", str(free_port())],
        cwd=ROOT,
        env={
            **os.environ,
            "SVC_DATA_DIR": str(tmp_path / "data"),
            "SVC_MODELS_FILE": str(path),
            "SVC_RESERVATION_DEADLINE_S": "60",
        },
        capture_output=True,
        timeout=60,
        check=False,
    )
    output = (done.stdout + done.stderr).decode()
    assert done.returncode == 2, output
    assert "cannot start" in output
    assert "field 'providers.mock.idle_timeout_s': 20 s is not shorter" in output
    assert "SVC_RESERVATION_DEADLINE_S (60 s / 3 = 20 s)" in output


def test_a_worker_serves_worker_streams_requests_at_once(tmp_path: Path, mock: MockProcess) -> None:
    """SVC_WORKER_STREAMS is granian's backpressure: with 2, a third stream waits, accepted,
    until one of the first two ends (then it is served in full)."""
    path = models_file(tmp_path / "models.toml", mock.base_url, {"svc-smart": ["smart-slow50"]})
    srv = start_server(
        tmp_path,
        extra_env={
            "SVC_MODELS_FILE": str(path),
            "MOCK_API_KEY": "k",
            "SVC_WORKER_STREAMS": "2",
        },
    )
    try:
        key = srv.new_key(srv.new_account(100_000))

        async def stream(delay: float) -> tuple[float, float, int]:
            await asyncio.sleep(delay)
            body = {"model": "svc-smart", "messages": [{"role": "user", "content": "hi"}]}
            async with httpx.AsyncClient(timeout=30) as client:
                started = time.monotonic()
                async with client.stream(
                    "POST",
                    f"{srv.base_url}/chat/completions",
                    json=body,
                    headers={"authorization": f"Bearer {key}"},
                ) as response:
                    first = time.monotonic() - started
                    text = (await response.aread()).decode()
                    return first, time.monotonic() - started, text.count('"content"')

        async def three() -> list[tuple[float, float, int]]:
            return await asyncio.gather(stream(0), stream(0), stream(0.2))

        results = asyncio.run(three())
        (_, whole_a, _), (_, whole_b, _), (third_first, _, third_chunks) = results
        # 20 chunks 50 ms apart: each of the first two takes about a second
        assert min(whole_a, whole_b) > 0.8
        assert third_first > min(whole_a, whole_b) - 0.2 - 0.1  # it waited for a free slot
        assert third_chunks >= 20
    finally:
        stop_server(srv.process)
