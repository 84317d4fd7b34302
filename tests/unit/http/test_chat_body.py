"""Reading a streaming request's body from granian (``RSGIExchange.body``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from granian._granian import RSGIProtocolClosed

from app.core.errors import ApiError, ClientDisconnected
from app.http.rsgi.exchange import RSGIExchange
from tests.support.rsgi_transport import FakeHeaders, FakeProtocol, FakeScope

LIMIT = 16


class _Counted(FakeProtocol):
    """Notes which of granian's two ways of reading a body was used."""

    def __init__(self, body: list[bytes]) -> None:
        super().__init__(body)
        self.ways: list[str] = []

    async def __call__(self) -> bytes:
        self.ways.append("whole")
        return await super().__call__()

    def __aiter__(self) -> AsyncIterator[bytes]:
        self.ways.append("pieces")
        return super().__aiter__()


def _scope(length: int | None) -> FakeScope:
    headers = [] if length is None else [("content-length", str(length))]
    return FakeScope("POST", "/v1/chat/completions", FakeHeaders(headers))


async def test_a_body_of_known_size_is_read_whole_in_one_wait() -> None:
    protocol = _Counted([b'{"a":', b"1}"])
    assert await RSGIExchange(_scope(7), protocol).body(LIMIT) == b'{"a":1}'
    assert protocol.ways == ["whole"]


async def test_a_body_without_a_size_is_read_in_pieces_up_to_the_limit() -> None:
    protocol = _Counted([b'{"a":', b"1}"])
    assert await RSGIExchange(_scope(None), protocol).body(LIMIT) == b'{"a":1}'
    assert protocol.ways == ["pieces"]
    with pytest.raises(ApiError) as refused:
        await RSGIExchange(_scope(None), _Counted([b"x" * 10, b"y" * 10])).body(LIMIT)
    assert refused.value.status == 413


async def test_a_declared_size_over_the_limit_is_refused_unread() -> None:
    protocol = _Counted([b"x" * 20])
    with pytest.raises(ApiError) as refused:
        await RSGIExchange(_scope(20), protocol).body(LIMIT)
    assert refused.value.status == 413
    assert protocol.ways == []


async def test_a_client_that_leaves_mid_body_is_a_disconnect() -> None:
    async def half() -> AsyncIterator[bytes]:
        yield b"ab"
        protocol.disconnect()  # granian ends the body early
        yield b"cd"

    protocol = _Counted([])
    protocol._body = half()
    with pytest.raises(ClientDisconnected):
        await RSGIExchange(_scope(4), protocol).body(LIMIT)


async def test_a_body_granian_could_not_finish_is_a_disconnect() -> None:
    class _Broken(FakeProtocol):
        async def __call__(self) -> bytes:
            raise RSGIProtocolClosed("RSGI transport is closed")

    with pytest.raises(ClientDisconnected):
        await RSGIExchange(_scope(4), _Broken([b"ab"])).body(LIMIT)
