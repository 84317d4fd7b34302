"""svc behind an egress proxy: with HTTPS_PROXY set, a real server reaches its https
upstream only through the proxy (a real tinyproxy), settles what it relayed, and answers 502
(retryable, nothing charged) when the proxy is down although the upstream is up."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_upstreams import models_file
from tests.support.certificates import self_signed
from tests.support.forward_proxy import ForwardProxy

pytestmark = pytest.mark.e2e
FUNDS = 1_000_000


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("egress")


@pytest.fixture(scope="module")
def certificate(folder: Path) -> tuple[Path, Path]:
    return self_signed(folder)


@pytest.fixture(scope="module")
def tls_mock(certificate: tuple[Path, Path]) -> Iterator[MockProcess]:
    cert, key = certificate
    process = start_in_subprocess(chunks=8, tls=(str(cert), str(key)))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def proxy(folder: Path) -> Iterator[ForwardProxy]:
    running = ForwardProxy(folder).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def server(
    folder: Path, certificate: tuple[Path, Path], tls_mock: MockProcess, proxy: ForwardProxy
) -> Iterator[Server]:
    assert tls_mock.base_url.startswith("https://")
    path = models_file(folder / "models.toml", tls_mock.base_url, {"svc-fast": ["fast-model"]})
    srv = start_server(
        folder,
        workers=1,
        extra_env={
            "SVC_MODELS_FILE": str(path),
            "HTTPS_PROXY": proxy.url,
            "NO_PROXY": "",
            "no_proxy": "",
            "SSL_CERT_FILE": str(certificate[0]),
        },
    )
    yield srv
    stop_server(srv.process)


def _complete(server: Server, key: str) -> httpx.Response:
    body = {"model": "svc-fast", "messages": [{"role": "user", "content": "hello"}]}
    return httpx.post(
        f"{server.base_url}/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json=body,
        timeout=30,
    )


def _metadata(response: httpx.Response) -> dict[str, object]:
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: {")]
    last = json.loads(events[-1])
    assert isinstance(last["svc"], dict)
    return last["svc"]


def test_the_upstream_is_reached_through_the_proxy_only(
    server: Server, proxy: ForwardProxy, tls_mock: MockProcess
) -> None:
    pid = server.new_account(FUNDS)
    key = server.new_key(pid)
    served = _complete(server, key)
    assert served.status_code == 200, served.text
    metadata = _metadata(served)
    assert isinstance(metadata["credits_used"], int)
    assert metadata["credits_used"] > 0
    assert metadata["balance_remaining"] == FUNDS - metadata["credits_used"]
    assert proxy.requests() == [f"CONNECT 127.0.0.1:{tls_mock.port} HTTP/1.1"]

    proxy.stop()  # the upstream is still up: only the way to it is gone
    refused = _complete(server, key)
    assert refused.status_code == 502, refused.text
    assert refused.headers["x-should-retry"] == "true"
    assert refused.json()["error"]["code"] == "upstream_unavailable"
    credits = httpx.get(
        f"{server.base_url}/credits", headers={"authorization": f"Bearer {key}"}
    ).json()
    assert credits["total_available"] == metadata["balance_remaining"]  # nothing charged
