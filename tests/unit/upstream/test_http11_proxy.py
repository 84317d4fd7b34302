"""The upstream client through a real forward proxy (Debian's tinyproxy): https upstreams
through a CONNECT tunnel, http ones in absolute form, the proxy's credentials, NO_PROXY, and
no way around a proxy that is down."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.core.errors import UpstreamError
from app.upstream.base import Piece
from app.upstream.config import ProviderConfig
from app.upstream.http11 import StreamingProvider
from bench.mock_upstream import MockUpstream, server_tls
from tests.support.certificates import self_signed
from tests.support.forward_proxy import ForwardProxy
from tests.support.upstream_helpers import upstream_call

PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def no_proxy_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets: the machine's own proxy variables (either case) are cleared."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[ForwardProxy]:
    running = ForwardProxy(tmp_path).start()
    yield running
    running.stop()


@pytest.fixture
async def tls_mock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[MockUpstream]:
    """The mock upstream over https, with a certificate the client trusts (SSL_CERT_FILE)."""
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    mock = MockUpstream(chunks=5)
    await mock.start(tls=server_tls((str(cert), str(key))))
    yield mock
    await mock.stop()


async def _texts(provider: StreamingProvider) -> list[str]:
    pieces: list[Piece] = [p async for batch in provider.stream(upstream_call()) for p in batch]
    return [piece for piece in pieces if isinstance(piece, str)]


async def _read_once(base_url: str) -> list[str]:
    provider = StreamingProvider(ProviderConfig(base_url=base_url, connect_timeout_s=2))
    try:
        return await _texts(provider)
    finally:
        await provider.close()


async def test_https_goes_through_the_proxys_tunnel(
    tls_mock: MockUpstream, proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    provider = StreamingProvider(ProviderConfig(base_url=tls_mock.base_url))
    assert provider.proxy is not None
    try:
        assert len(await _texts(provider)) == 5
        assert len(await _texts(provider)) == 5  # on the same tunnel, kept alive
    finally:
        await provider.close()
    assert proxy.requests() == [f"CONNECT 127.0.0.1:{tls_mock.port} HTTP/1.1"]
    assert tls_mock.stats.requests == 2


async def test_http_goes_to_the_proxy_in_absolute_form(
    mock: MockUpstream, proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # not for http URLs
    assert len(await _read_once(mock.base_url)) == 20
    assert proxy.requests() == [f"POST http://127.0.0.1:{mock.port}/v1/chat/completions HTTP/1.1"]


async def test_a_proxy_that_is_down_is_no_way_around(
    tls_mock: MockUpstream, proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    proxy.stop()
    with pytest.raises(UpstreamError, match="connect failed"):
        await _read_once(tls_mock.base_url)
    assert tls_mock.stats.requests == 0  # the upstream was up, and never reached


async def test_no_proxy_hosts_are_reached_directly(
    tls_mock: MockUpstream, proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("no_proxy", "example.com,127.0.0.1")
    assert len(await _read_once(tls_mock.base_url)) == 5
    assert proxy.requests() == []


async def test_the_proxys_credentials_come_from_its_url(
    tls_mock: MockUpstream, mock: MockUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guarded = ForwardProxy(tmp_path, user="svc", password="s3cret").start()
    try:
        anonymous = guarded.url.replace("svc:s3cret@", "")
        monkeypatch.setenv("HTTPS_PROXY", anonymous)
        with pytest.raises(UpstreamError, match="connect failed: ProxyRefused"):
            await _read_once(tls_mock.base_url)
        monkeypatch.setenv("HTTPS_PROXY", guarded.url)
        monkeypatch.setenv("HTTP_PROXY", guarded.url)
        assert len(await _read_once(tls_mock.base_url)) == 5
        assert len(await _read_once(mock.base_url)) == 20  # plain http: the header per request
    finally:
        guarded.stop()
    assert tls_mock.stats.requests == 1
    assert len(guarded.requests()) == 3


async def test_a_refused_tunnel_is_a_connect_failure(
    tls_mock: MockUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    strict = ForwardProxy(tmp_path, connect_ports=(443,)).start()
    try:
        monkeypatch.setenv("HTTPS_PROXY", strict.url)
        with pytest.raises(UpstreamError, match="connect failed: ProxyRefused"):
            await _read_once(tls_mock.base_url)
    finally:
        strict.stop()
    assert tls_mock.stats.requests == 0
