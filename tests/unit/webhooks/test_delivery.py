"""A delivery's way out (httpx): straight to the address its check passed, with the name
kept in Host and in the TLS handshake, or through the forward proxy the environment names
(a real tinyproxy)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.store import DeliveryRecord, DueDelivery, Store
from app.webhooks.delivery import Deliverer
from app.webhooks.signing import SIGNATURE_HEADER
from app.webhooks.targets import NOBODY, AllowList
from tests.support.certificates import self_signed
from tests.support.forward_proxy import ForwardProxy

HOOK_NAME = "hooks.example.test"


@pytest.fixture(autouse=True)
def no_proxy_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


class Receiver:
    """A webhook receiver on 127.0.0.1: keeps each request's head, answers 204."""

    def __init__(self) -> None:
        self.heads: list[str] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self, tls: ssl.SSLContext | None = None) -> Receiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=tls)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            length = next(
                int(line.split(":", 1)[1])
                for line in head.split("\r\n")
                if line.lower().startswith("content-length:")
            )
            await reader.readexactly(length)
            self.heads.append(head.lower())
            writer.write(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    running = await Receiver().start()
    yield running
    await running.stop()


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[ForwardProxy]:
    running = ForwardProxy(tmp_path).start()
    yield running
    running.stop()


def _due(url: str) -> DueDelivery:
    record = DeliveryRecord(
        event_id="evt_1",
        webhook_id="wh_1",
        account_pid="acct_A",
        type="key.revoked",
        created=1,
        data="{}",
        status="pending",
        attempt=0,
        status_code=None,
        error=None,
        next_attempt_at=1,
        lease_until=0,
        updated_at=1,
    )
    return DueDelivery(delivery=record, url=url, secret_salt="salt")


def _deliverer(store: Store, allow: AllowList) -> Deliverer:
    return Deliverer(store, b"pepper", allow, timeout_s=5)


async def test_a_host_let_through_by_name_is_sent_to_directly(
    store: Store, receiver: Receiver
) -> None:
    deliverer = _deliverer(store, AllowList.parse("localhost"))
    try:
        sent = await deliverer._send(_due(f"http://localhost:{receiver.port}/hook"))
    finally:
        await deliverer.close()
    assert sent == (204, None)
    [head] = receiver.heads
    assert head.startswith("post /hook http/1.1")
    assert f"host: localhost:{receiver.port}\r\n" in head
    assert f"{SIGNATURE_HEADER.lower()}: t=" in head


async def test_a_checked_name_is_reached_at_the_address_its_check_passed(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name resolves once, to an address the allow list covers; the connection goes to
    that address, while Host and the certificate check still name the host."""
    cert, key = self_signed(tmp_path, HOOK_NAME)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    receiver = await Receiver().start(tls)
    lookups: list[str] = []

    async def resolve(host: str, port: int, **_: object) -> list[tuple[object, ...]]:
        lookups.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", resolve)
    deliverer = _deliverer(store, AllowList.parse("127.0.0.0/8"))
    try:
        sent = await deliverer._send(_due(f"https://{HOOK_NAME}:{receiver.port}/hook"))
    finally:
        await deliverer.close()
        await receiver.stop()
    assert sent == (204, None)
    assert lookups == [HOOK_NAME]  # one lookup, the check's: the connection used its answer
    [head] = receiver.heads
    assert f"host: {HOOK_NAME}:{receiver.port}\r\n" in head


async def test_a_name_resolving_inside_gets_no_connection(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def resolve(host: str, port: int, **_: object) -> list[tuple[object, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", port))]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", resolve)
    deliverer = _deliverer(store, NOBODY)
    try:
        status, error = await deliverer._send(_due(f"https://{HOOK_NAME}/hook"))
    finally:
        await deliverer.close()
    assert status is None
    assert error is not None
    assert error.startswith("refused: 'url' resolves to a private")


async def test_a_delivery_goes_through_the_environments_proxy(
    store: Store, receiver: Receiver, proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    deliverer = _deliverer(store, AllowList.parse("localhost"))
    try:
        sent = await deliverer._send(_due(f"http://localhost:{receiver.port}/hook"))
        monkeypatch.setenv("NO_PROXY", "localhost")
        direct = await deliverer._send(_due(f"http://localhost:{receiver.port}/hook"))
    finally:
        await deliverer.close()
    assert sent == direct == (204, None)
    assert proxy.requests() == [f"POST http://localhost:{receiver.port}/hook HTTP/1.1"]
    assert len(receiver.heads) == 2


async def test_a_proxy_that_is_down_fails_the_attempt(
    store: Store, receiver: Receiver, proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    proxy.stop()
    deliverer = _deliverer(store, AllowList.parse("localhost"))
    try:
        sent = await deliverer._send(_due(f"http://localhost:{receiver.port}/hook"))
    finally:
        await deliverer.close()
    assert sent == (None, "connection failed")
    assert receiver.heads == []
