"""svc's upstream client (app.upstream.http11.StreamingProvider): the mock's faults, the
keep-alive pool, framing, timeouts, TLS and flow control, against the in-process mock and,
for what the mock cannot do, tiny raw servers."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import msgspec
import pytest

from app.core.errors import UpstreamError
from app.upstream.base import Piece, Usage
from app.upstream.config import ProviderConfig
from app.upstream.http11 import StreamingProvider
from app.upstream.http11 import pool as http11_pool
from app.upstream.http11 import provider as http11_provider
from app.upstream.http11.connection import PAUSE_AT
from app.upstream.http11.tunnel import Origin
from bench.mock_upstream import MockUpstream
from tests.support.certificates import self_signed
from tests.support.upstream_helpers import upstream_call

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
Serve = Callable[..., Awaitable[tuple["_Server", int]]]


async def _read(provider: StreamingProvider, model: str = "m") -> list[Piece]:
    return [piece async for batch in provider.stream(upstream_call(model)) for piece in batch]


def _texts(pieces: list[Piece]) -> list[str]:
    return [piece for piece in pieces if isinstance(piece, str)]


def _provider(base_url: str, **limits: float) -> StreamingProvider:
    return StreamingProvider(ProviderConfig(base_url=base_url, **limits))  # type: ignore[arg-type]


# -- the mock's faults


async def test_a_stream_is_read_to_its_usage(mock: MockUpstream) -> None:
    provider = _provider(mock.base_url)
    try:
        pieces = await _read(provider)
    finally:
        await provider.close()
    assert len(_texts(pieces)) == 20
    assert pieces[-1] == Usage(prompt_tokens=4, completion_tokens=20)


@pytest.mark.parametrize(
    ("model", "texts"), [("m-slow20", 20), ("m-tokens5x10", 5), ("m-ignoremax-tokens3x1", 3)]
)
async def test_streams_written_token_by_token(mock: MockUpstream, model: str, texts: int) -> None:
    provider = _provider(mock.base_url)
    try:
        assert len(_texts(await _read(provider, model))) == texts
    finally:
        await provider.close()


async def test_no_usage_reported(mock: MockUpstream) -> None:
    provider = _provider(mock.base_url)
    try:
        pieces = await _read(provider, "m-nousage")
    finally:
        await provider.close()
    assert len(_texts(pieces)) == 20
    assert not any(isinstance(piece, Usage) for piece in pieces)


@pytest.mark.parametrize(
    ("model", "reason"),
    [("m-fail500", "upstream status 500"), ("m-fail429", "upstream status 429")],
)
async def test_a_failing_status_is_an_upstream_error(
    mock: MockUpstream, model: str, reason: str
) -> None:
    provider = _provider(mock.base_url)
    try:
        with pytest.raises(UpstreamError) as failure:
            await _read(provider, model)
    finally:
        await provider.close()
    assert failure.value.reason == reason
    assert not failure.value.client_error


async def test_a_400_is_the_clients_error_without_the_model_name(mock: MockUpstream) -> None:
    provider = _provider(mock.base_url)
    try:
        with pytest.raises(UpstreamError) as failure:
            await _read(provider, "secret-model-fail400")
    finally:
        await provider.close()
    assert failure.value.client_error
    assert "8192 tokens" in failure.value.reason
    assert "secret-model" not in failure.value.reason


async def test_a_refused_request_fails_to_connect(mock: MockUpstream) -> None:
    provider = _provider(mock.base_url)
    try:
        with pytest.raises(UpstreamError, match="connect failed: ServerDisconnected"):
            await _read(provider, "m-refuse")
    finally:
        await provider.close()


async def test_a_failed_first_request_then_a_good_one(mock: MockUpstream) -> None:
    provider = _provider(mock.base_url)
    try:
        with pytest.raises(UpstreamError, match="status 500"):
            await _read(provider, "m-failonce")
        assert len(_texts(await _read(provider, "m-failonce"))) == 20
    finally:
        await provider.close()
    assert mock.stats.connections == 1  # an error response read to its end keeps its connection


async def test_a_dropped_stream_fails_after_what_arrived(mock: MockUpstream) -> None:
    provider = _provider(mock.base_url)
    received: list[Piece] = []

    async def read() -> None:
        async for batch in provider.stream(upstream_call("m-drop3")):
            received.extend(batch)

    try:
        with pytest.raises(UpstreamError, match="stream failed: ServerDisconnected"):
            await read()
    finally:
        await provider.close()
    assert len(_texts(received)) == 3


async def test_a_stall_before_the_first_byte_hits_the_first_byte_deadline(
    mock: MockUpstream,
) -> None:
    provider = _provider(mock.base_url, first_byte_timeout_s=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(UpstreamError, match="connect failed: TimeoutError"):
            await _read(provider, "m-stall")
        assert 0.3 <= time.monotonic() - started < 2
    finally:
        await provider.close()


async def test_a_stall_mid_stream_hits_the_idle_timeout(mock: MockUpstream) -> None:
    provider = _provider(mock.base_url, idle_timeout_s=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(UpstreamError, match="stream failed: idle timeout"):
            await _read(provider, "m-stallafter2")
        assert 0.3 <= time.monotonic() - started < 2
    finally:
        await provider.close()


async def test_a_slow_steady_stream_outlives_many_idle_periods(mock: MockUpstream) -> None:
    provider = _provider(mock.base_url, idle_timeout_s=0.3)
    try:
        assert len(_texts(await _read(provider, "m-tokens10x100"))) == 10
    finally:
        await provider.close()


async def test_an_unreachable_upstream_fails_to_connect() -> None:
    provider = _provider("http://127.0.0.1:9/v1", connect_timeout_s=1)
    try:
        with pytest.raises(UpstreamError, match="connect failed: ConnectionRefusedError"):
            await _read(provider)
    finally:
        await provider.close()


# -- what is sent


async def test_the_request_carries_host_port_key_and_body(
    mock: MockUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THIN_TEST_KEY", "sk-test")
    provider = StreamingProvider(
        ProviderConfig(base_url=mock.base_url + "/", api_key_env="THIN_TEST_KEY")
    )
    try:
        await _read(provider, "m-dense")
    finally:
        await provider.close()
    headers = mock.stats.last_headers
    assert headers["host"] == f"127.0.0.1:{mock.port}"
    assert headers["authorization"] == "Bearer sk-test"
    assert headers["accept"] == "text/event-stream"
    request = mock.stats.last_request
    assert request["model"] == "m-dense"
    assert request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}
    assert request["max_tokens"] == 100


# -- the pool


async def test_sequential_streams_share_one_connection(mock: MockUpstream) -> None:
    provider = _provider(mock.base_url)
    try:
        for model in ("m", "m-tokens3x1", "m-fail400", "m"):
            with contextlib.suppress(UpstreamError):
                await _read(provider, model)
    finally:
        await provider.close()
    assert mock.stats.connections == 1
    assert mock.stats.requests == 4


async def test_connections_idle_past_the_keepalive_are_closed(
    mock: MockUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http11_pool, "KEEPALIVE_S", 0.1)
    provider = _provider(mock.base_url)
    try:
        await asyncio.gather(_read(provider, "m-tokens2x20"), _read(provider, "m-tokens2x20"))
        await _read(provider)  # one of the two, used again: the other one expires first
        await asyncio.sleep(0.05)
        await _read(provider)
        await asyncio.sleep(0.3)
        assert not provider._pool._all
        await _read(provider)
    finally:
        await provider.close()
    assert mock.stats.connections == 3


async def test_the_pool_bound_makes_the_third_stream_wait(mock: MockUpstream) -> None:
    provider = _provider(mock.base_url, max_connections=2)
    in_flight: list[int] = []

    async def one() -> int:
        count = 0
        async for batch in provider.stream(upstream_call("m-tokens5x40")):
            in_flight.append(mock.stats.in_flight)
            count += len(_texts(batch))
        return count

    try:
        assert await asyncio.gather(one(), one(), one()) == [5, 5, 5]
    finally:
        await provider.close()
    assert max(in_flight) == 2
    assert mock.stats.connections == 2


async def test_waiting_for_a_free_connection_is_bounded_by_the_connect_timeout(
    mock: MockUpstream,
) -> None:
    provider = _provider(mock.base_url, max_connections=1, connect_timeout_s=0.2)
    holder = asyncio.ensure_future(_read(provider, "m-stallafter1"))
    try:
        await asyncio.sleep(0.1)
        with pytest.raises(UpstreamError, match="connect failed: TimeoutError"):
            await _read(provider)
        waiting = asyncio.ensure_future(_read(provider))
        await asyncio.sleep(0.05)
        holder.cancel()  # its connection closes: the one waiting in line gets the place
        assert len(_texts(await waiting)) == 20
    finally:
        holder.cancel()
        await provider.close()


async def test_a_stream_left_early_closes_its_connection(mock: MockUpstream) -> None:
    provider = _provider(mock.base_url)
    try:
        stream = provider.stream(upstream_call("m-tokens10x20"))
        assert _texts(await anext(stream))
        await stream.aclose()  # type: ignore[attr-defined]
        assert len(_texts(await _read(provider))) == 20
        await asyncio.sleep(0.05)
    finally:
        await provider.close()
    assert mock.stats.connections == 2  # the half-read one went, not back to the pool
    assert mock.stats.client_disconnects == 1


async def test_a_read_cancelled_midway_closes_its_connection(mock: MockUpstream) -> None:
    provider = _provider(mock.base_url)
    got_first = asyncio.Event()

    async def reader() -> None:
        async for _batch in provider.stream(upstream_call("m-stallafter3")):
            got_first.set()

    try:
        task = asyncio.ensure_future(reader())
        await got_first.wait()
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(_texts(await _read(provider))) == 20
        await asyncio.sleep(0.05)
    finally:
        await provider.close()
    assert mock.stats.connections == 2
    assert mock.stats.client_disconnects == 1


# -- raw servers, for what the mock does not do


def _event(text: str) -> bytes:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": None}
    return b"data: " + msgspec.json.encode({"choices": [choice]}) + b"\n\n"


def _sse(count: int) -> bytes:
    return b"".join(_event(f"t{i} ") for i in range(count)) + b"data: [DONE]\n\n"


def _chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


_CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def _length_response(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n"
        % len(body)
        + body
    )


async def _request(reader: asyncio.StreamReader) -> bytes | None:
    """One request's head (its body read and dropped), None at the end of the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))
    return head


class _Server:
    """A raw asyncio server running ``handler`` per connection; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.heads: list[bytes] = []
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        finally:
            writer.close()

    async def start(self, tls: ssl.SSLContext | None = None) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=tls)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[_Server] = []

    async def start(handler: Handler, tls: ssl.SSLContext | None = None) -> tuple[_Server, int]:
        server = _Server(handler)
        servers.append(server)
        return server, await server.start(tls)

    yield start
    for server in servers:
        await server.stop()


async def test_a_content_length_body_under_a_path_prefix(serve: Serve) -> None:
    heads: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (head := await _request(reader)) is not None:
            heads.append(head)
            writer.write(_length_response(_sse(4)))

    _, port = await serve(handler)
    provider = _provider(f"http://127.0.0.1:{port}/prefix/v1")
    try:
        assert _texts(await _read(provider)) == ["t0 ", "t1 ", "t2 ", "t3 "]
        assert len(_texts(await _read(provider))) == 4
    finally:
        await provider.close()
    assert heads[0].startswith(b"POST /prefix/v1/chat/completions HTTP/1.1\r\n")
    assert len(heads) == 2  # on one connection


async def test_a_body_ending_before_done_closed_the_stream_early(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(_length_response(_event("a") + _event("b")))

    _, port = await serve(handler)
    provider = _provider(f"http://127.0.0.1:{port}/v1")
    try:
        with pytest.raises(UpstreamError, match="upstream closed the stream early"):
            await _read(provider)
    finally:
        await provider.close()


async def test_a_body_delimited_by_closing(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n" + _sse(3))

    _, port = await serve(handler)
    provider = _provider(f"http://127.0.0.1:{port}/v1")
    try:
        assert len(_texts(await _read(provider))) == 3
    finally:
        await provider.close()


async def test_the_chunked_terminator_arriving_later_still_pools(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await _request(reader) is not None:
            body = _sse(2)
            writer.write(_CHUNKED_HEAD + b"%x\r\n%s\r\n" % (len(body), body))
            await asyncio.sleep(0.05)  # [DONE] is read well before the message ends
            writer.write(b"0\r\n\r\n")

    server, port = await serve(handler)
    provider = _provider(f"http://127.0.0.1:{port}/v1")
    try:
        for _ in range(3):
            assert len(_texts(await _read(provider))) == 2
            await asyncio.sleep(0.1)  # meanwhile the message ends and the connection is pooled
    finally:
        await provider.close()
    assert server.connections == 1


async def test_a_connection_sending_more_than_its_response_is_not_pooled(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await _request(reader) is not None:
            writer.write(_CHUNKED_HEAD + _chunked(_sse(2)) + b"HTTP/1.1 200 OK\r\n")

    server, port = await serve(handler)
    provider = _provider(f"http://127.0.0.1:{port}/v1")
    try:
        assert len(_texts(await _read(provider))) == 2
        assert len(_texts(await _read(provider))) == 2
    finally:
        await provider.close()
    assert server.connections == 2


async def test_an_idle_connection_the_server_closed_is_not_used(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(_CHUNKED_HEAD + _chunked(_sse(2)))
        await writer.drain()
        await asyncio.sleep(0.02)  # its keep-alive runs out

    server, port = await serve(handler)
    provider = _provider(f"http://127.0.0.1:{port}/v1")
    try:
        assert len(_texts(await _read(provider))) == 2
        await asyncio.sleep(0.1)
        assert len(_texts(await _read(provider))) == 2
    finally:
        await provider.close()
    assert server.connections == 2


async def test_a_pooled_connection_closed_as_the_request_went_is_retried(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http11_provider, "STALE_AFTER_S", 0.05)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(_CHUNKED_HEAD + _chunked(_sse(2)))
        await _request(reader)  # a second request on this connection: closed unanswered

    server, port = await serve(handler)
    provider = _provider(f"http://127.0.0.1:{port}/v1")
    try:
        for _ in range(3):
            assert len(_texts(await _read(provider))) == 2
            await asyncio.sleep(0.1)  # idle long enough for a keep-alive to have run out
    finally:
        await provider.close()
    assert server.connections == 3


async def test_a_connection_reused_at_once_and_closed_unanswered_is_not_retried(
    mock: MockUpstream,
) -> None:
    # a refusal, not an expired keep-alive: resending would make the upstream serve it twice
    provider = _provider(mock.base_url)
    try:
        await _read(provider)
        with pytest.raises(UpstreamError, match="connect failed: ServerDisconnected"):
            await _read(provider, "m-refuse")
    finally:
        await provider.close()
    assert mock.stats.seen_models["m-refuse"] == 1


async def test_a_fresh_connection_closed_unanswered_is_not_retried(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)

    server, port = await serve(handler)
    provider = _provider(f"http://127.0.0.1:{port}/v1")
    try:
        with pytest.raises(UpstreamError, match="connect failed: ServerDisconnected"):
            await _read(provider)
    finally:
        await provider.close()
    assert server.connections == 1


async def test_the_first_byte_deadline_covers_the_first_content(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(_CHUNKED_HEAD)  # the head at once, then nothing
        await asyncio.sleep(10)

    _, port = await serve(handler)
    provider = _provider(f"http://127.0.0.1:{port}/v1", first_byte_timeout_s=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(UpstreamError, match="stream failed: TimeoutError"):
            await _read(provider)
        assert 0.3 <= time.monotonic() - started < 2
    finally:
        await provider.close()


async def test_a_malformed_response_fails_the_stream(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(_CHUNKED_HEAD + _chunked(_event("a"))[:-5] + b"zz\r\n")

    _, port = await serve(handler)
    provider = _provider(f"http://127.0.0.1:{port}/v1")
    try:
        with pytest.raises(UpstreamError, match="stream failed: HttpParser"):
            await _read(provider)
    finally:
        await provider.close()


async def test_a_reader_that_falls_behind_pauses_the_socket(serve: Serve) -> None:
    count = PAUSE_AT * 20

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(_CHUNKED_HEAD + _chunked(_sse(count)))
        await writer.drain()

    _, port = await serve(handler)
    provider = _provider(f"http://127.0.0.1:{port}/v1")
    try:
        stream = provider.stream(upstream_call())
        received = _texts(await anext(stream))
        await asyncio.sleep(0.2)  # a slow client: nothing is taken meanwhile
        [conn] = provider._pool._all
        assert conn.transport is not None
        assert not conn.transport.is_reading()
        async for batch in stream:
            received += _texts(batch)
        assert len(received) == count
    finally:
        await provider.close()


# -- TLS


async def test_tls_with_a_verified_certificate(
    serve: Serve,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cert, key = self_signed(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    heads: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (head := await _request(reader)) is not None:
            heads.append(head)
            writer.write(_CHUNKED_HEAD + _chunked(_sse(3)))

    _, port = await serve(handler, tls)
    # the client trusts the system's authorities: without this one it refuses the server
    untrusting = _provider(f"https://127.0.0.1:{port}/v1")
    try:
        with pytest.raises(UpstreamError, match="connect failed: SSLCertVerificationError"):
            await _read(untrusting)
    finally:
        await untrusting.close()
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    provider = _provider(f"https://127.0.0.1:{port}/v1")
    try:
        assert len(_texts(await _read(provider))) == 3
        assert len(_texts(await _read(provider))) == 3
    finally:
        await provider.close()
    assert len(heads) == 2
    assert f"host: 127.0.0.1:{port}\r\n".encode() in heads[0]


async def test_a_waiter_cancelled_as_a_turn_came_by_leaves_the_line_cleanly(
    mock: MockUpstream,
) -> None:
    """Found holding 10,000 streams (bench/README.md, scale): a request waiting for a free
    connection is cancelled (its connect timeout) and, before it runs again, a connection
    frees and the turn passes over its cancelled waiter. It must fail with its own
    cancellation (the timeout), not with the line's bookkeeping (it was a 500)."""
    config = ProviderConfig(base_url=mock.base_url, max_connections=1)
    url = urlsplit(mock.base_url)
    origin = Origin(url.hostname or "127.0.0.1", url.port or 80, tls=False)
    pool = http11_pool.Pool(config, origin, None)
    held = await pool.acquire(fresh=False)
    waiting = asyncio.ensure_future(pool.acquire(fresh=False))
    await asyncio.sleep(0)  # in line
    waiting.cancel()  # its waiter is cancelled now; the task runs its except clause later
    pool._pass_turn()  # a place frees first: the cancelled waiter is passed over and dropped
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not pool._waiters
    held.close()
    pool.close()
