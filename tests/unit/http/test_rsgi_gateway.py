"""The RSGI side of the Gateway: the ASGI adapter the Litestar routes go through, and the
Litestar lifespan run from granian's ``__rsgi_init__`` / ``__rsgi_del__`` hooks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from litestar import Litestar, Request, get, post
from litestar.params import FromPath
from litestar.response import Stream

from app.http.rsgi.asgi_bridge import ASGIRequest, Message, asgi_scope
from app.http.rsgi.gateway import Gateway
from app.http.rsgi.protocol import parse_address
from tests.support.rsgi_transport import FakeHeaders, FakeProtocol, FakeScope, RSGITransport

LIMIT = 64  # the request body limit of the Litestar app below


@get("/echo/{name:str}")
async def echo(request: Request[Any, Any, Any], name: FromPath[str]) -> dict[str, Any]:
    client = request.client
    return {
        "name": name,
        # the names in order (Litestar's order of names varies), each name's values as sent
        "query": sorted([[k, v] for k, v in request.query_params.multi_items()], key=_name),
        "client": [client.host, client.port] if client else None,
        "scope": {k: request.scope[k] for k in ("http_version", "root_path", "scheme")},  # type: ignore[literal-required]
    }


def _name(item: list[str]) -> str:
    return item[0]


@post("/size", status_code=200)
async def size(request: Request[Any, Any, Any]) -> dict[str, int]:
    return {"size": len(await request.body())}


@get("/parts")
async def parts() -> Stream:
    return Stream(iter([b"one,", b"two,", b"three"]), media_type="text/plain")


def litestar_app(lifespan: list[Any] | None = None) -> Litestar:
    return Litestar(
        route_handlers=[echo, size, parts],
        request_max_body_size=LIMIT,
        lifespan=lifespan or [],
        logging_config=None,
    )


def client(app: Litestar, address: tuple[str, int] = ("203.0.113.9", 4321)) -> httpx.AsyncClient:
    transport = RSGITransport(Gateway(app), client=address)
    return httpx.AsyncClient(transport=transport, base_url="http://svc.test")


# -- the scope ----------------------------------------------------------------------------


def test_the_asgi_scope_of_an_rsgi_request() -> None:
    state = {"lifespan": "state"}
    headers = FakeHeaders([("X-Mixed", "One"), ("x-forwarded-for", "a"), ("x-forwarded-for", "b")])
    scope = asgi_scope(
        FakeScope(
            "GET",
            "/a b/ü",
            headers,
            query_string="x=1&y=%20z&x=2",
            client="[::1]:50123",
            server="127.0.0.1:8000",
            http_version="1",
        ),
        state,
    )
    assert scope == {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.0",
        "method": "GET",
        "scheme": "http",
        "path": "/a b/ü",
        "raw_path": b"/a%20b/%C3%BC",
        "query_string": b"x=1&y=%20z&x=2",
        "root_path": "",
        "headers": [(b"x-mixed", b"One"), (b"x-forwarded-for", b"a"), (b"x-forwarded-for", b"b")],
        "client": ("::1", 50123),
        "server": ("127.0.0.1", 8000),
        "state": state,
    }
    assert scope["state"] is not state  # each request gets its own copy


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1:8000", ("127.0.0.1", 8000)),
        ("[::1]:50123", ("::1", 50123)),
        ("[::ffff:127.0.0.1]:9", ("::ffff:127.0.0.1", 9)),
        ("/run/svc.sock", None),
        ("", None),
    ],
)
def test_rsgi_addresses_become_host_and_port(text: str, address: tuple[str, int] | None) -> None:
    assert parse_address(text) == address


async def test_litestar_sees_the_path_query_and_ipv6_client_through_the_gateway() -> None:
    async with client(litestar_app(), ("::1", 50123)) as http:
        response = await http.get("/echo/a%20b", params=[("q", "x y"), ("q", "2"), ("e", "")])
    assert response.status_code == 200, response.text
    assert response.json() == {
        "name": "a b",
        "query": [["e", ""], ["q", "x y"], ["q", "2"]],
        "client": ["::1", 50123],
        "scope": {"http_version": "1.1", "root_path": "", "scheme": "http"},
    }
    assert response.headers["x-request-id"].startswith("req_")


# -- the body -----------------------------------------------------------------------------


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_a_streamed_body_is_received_in_full() -> None:
    async with client(litestar_app()) as http:
        response = await http.post("/size", content=_chunks(b"a" * 20, b"b" * 20))
    assert response.json() == {"size": 40}


async def test_a_streamed_body_over_the_limit_is_413_without_a_content_length() -> None:
    async with client(litestar_app()) as http:
        response = await http.post("/size", content=_chunks(b"a" * 40, b"b" * 40))
    assert response.status_code == 413
    assert response.headers["x-request-id"].startswith("req_")


async def test_the_body_arrives_as_http_request_messages_then_the_disconnect() -> None:
    received: list[Message] = []

    async def app(_scope: dict[str, Any], receive: Any, send: Any) -> None:
        while not received or received[-1].get("more_body"):
            received.append(await receive())
        received.append(await receive())  # waits for the client to go away
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body"})

    protocol = FakeProtocol([b"ab", b"", b"cd"])
    request = ASGIRequest(_scope(content_length="4"), protocol, {}, [])
    task = asyncio.create_task(request.run(app))
    await asyncio.sleep(0.01)
    assert not task.done()  # the client is still there
    protocol.disconnect()
    await task
    assert received == [
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.request", "body": b"cd", "more_body": True},
        {"type": "http.request", "body": b"", "more_body": False},
        {"type": "http.disconnect"},
    ]
    assert protocol.response.result().status == 204


async def test_a_client_gone_mid_body_is_http_disconnect() -> None:
    protocol = FakeProtocol()
    received: list[Message] = []

    async def body() -> AsyncIterator[bytes]:
        yield b"ab"
        protocol.disconnect()  # granian just ends the body early
        yield b"cd"

    async def app(_scope: dict[str, Any], receive: Any, _send: Any) -> None:
        received.extend([await receive(), await receive()])

    protocol._body = body()
    await ASGIRequest(_scope(content_length="4"), protocol, {}, []).run(app)
    assert received == [
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.disconnect"},
    ]


def _scope(content_length: str) -> FakeScope:
    return FakeScope("POST", "/x", FakeHeaders([("content-length", content_length)]))


# -- the response -------------------------------------------------------------------------


async def test_one_body_message_is_one_response_with_the_extra_headers() -> None:
    async def app(_scope: dict[str, Any], _receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/plain"), (b"x-caf", b"caf\xe9")]
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        await send({"type": "http.response.body", "body": b"done"})

    protocol = FakeProtocol()
    request = ASGIRequest(_scope("0"), protocol, {}, [("x-request-id", "req_1")])
    await request.run(app)
    response = protocol.response.result()
    assert (request.status, response.status, response.body) == (201, 201, b"done")
    assert response.headers == [
        ("content-type", "text/plain"),
        ("x-caf", "café"),
        ("x-request-id", "req_1"),
    ]
    assert not protocol.stream.chunks  # no stream


async def test_several_body_messages_are_one_stream_that_ends_with_the_last() -> None:
    async def app(_scope: dict[str, Any], _receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part, more in ((b"a", True), (b"", True), (b"b", True), (b"c", False)):
            await send({"type": "http.response.body", "body": part, "more_body": more})
        assert list(protocol.stream.chunks) == [b"a", b"b", b"c", None]  # ended already

    protocol = FakeProtocol()
    await ASGIRequest(_scope("0"), protocol, {}, [("x-request-id", "req_2")]).run(app)
    assert protocol.response.result().body is None  # a stream
    assert protocol.response.result().headers == [("x-request-id", "req_2")]


async def test_a_litestar_stream_reaches_the_client_in_parts() -> None:
    async with client(litestar_app()) as http, http.stream("GET", "/parts") as response:
        parts = [part async for part in response.aiter_raw()]
    assert parts == [b"one,", b"two,", b"three"]
    assert response.headers["x-request-id"].startswith("req_")


async def test_an_unknown_asgi_message_is_an_error() -> None:
    async def app(_scope: dict[str, Any], _receive: Any, send: Any) -> None:
        await send({"type": "http.response.pathsend", "path": "/etc/hosts"})

    with pytest.raises(RuntimeError, match="pathsend"):
        await ASGIRequest(_scope("0"), FakeProtocol(), {}, []).run(app)


# -- the lifespan -------------------------------------------------------------------------


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A loop that is not running, as granian hands it to the RSGI hooks."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_the_lifespan_starts_before_serving_and_shuts_down_after(
    loop: asyncio.AbstractEventLoop,
) -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        events.append("startup")
        app.state.ticks = 0

        async def tick() -> None:
            while True:
                app.state.ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())  # runs with the server, as svc's sweeper does
        try:
            yield
        finally:
            ticker.cancel()
            events.append("shutdown")

    app = litestar_app([lifespan])
    gateway = Gateway(app)
    gateway.__rsgi_init__(loop)
    assert events == ["startup"]

    async def serve() -> int:
        transport = RSGITransport(gateway)
        async with httpx.AsyncClient(transport=transport, base_url="http://svc.test") as http:
            response = await http.get("/echo/x")
        return response.status_code

    assert loop.run_until_complete(serve()) == 200
    assert app.state.ticks > 0
    gateway.__rsgi_del__(loop)
    assert events == ["startup", "shutdown"]
    assert not asyncio.all_tasks(loop)  # nothing left behind


def test_a_failed_startup_stops_the_worker_with_one_clear_line(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    @asynccontextmanager
    async def lifespan(_app: Litestar) -> AsyncIterator[None]:
        raise ConnectionError("Redis at redis://cache:6379 is unreachable")
        yield

    gateway = Gateway(litestar_app([lifespan]))
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as exited:
        gateway.__rsgi_init__(loop)
    assert exited.value.code == 1
    [record] = [r for r in caplog.records if r.name == "svc.serve"]
    assert record.getMessage() == (
        "the worker cannot start: ConnectionError: Redis at redis://cache:6379 is unreachable"
    )
    assert not asyncio.all_tasks(loop)


def test_a_failed_shutdown_is_logged(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    @asynccontextmanager
    async def lifespan(_app: Litestar) -> AsyncIterator[None]:
        yield
        raise OSError("the store went away")

    gateway = Gateway(litestar_app([lifespan]))
    gateway.__rsgi_init__(loop)
    with caplog.at_level(logging.ERROR):
        gateway.__rsgi_del__(loop)  # the worker is exiting anyway: no raise
    [record] = [r for r in caplog.records if r.name == "svc.serve"]
    assert record.getMessage() == "the worker's shutdown failed: OSError: the store went away"


def test_del_without_init_does_nothing(loop: asyncio.AbstractEventLoop) -> None:
    Gateway(litestar_app()).__rsgi_del__(loop)
