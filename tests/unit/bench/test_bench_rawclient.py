"""The scale levels' lean client (``bench.rawclient``) reads what aiohttp reads: a chunked
SSE stream checked event by event, kept alive between requests, an error status as an error."""

from __future__ import annotations

from bench.loadgen import LoadConfig
from bench.mock_upstream import MockUpstream
from bench.rawclient import raw_requests


async def test_paced_streams_are_read_checked_and_timed_over_one_connection() -> None:
    mock = MockUpstream()
    await mock.start()
    cfg = LoadConfig(base_url=mock.base_url, model="bench-tokens3x10", svc=False, client="raw")
    one, close = await raw_requests(cfg)
    try:
        first, second = await one(), await one()
    finally:
        await close()
        await mock.stop()
    for sample in (first, second):
        assert sample.error is None
        assert sample.chunks == 3
        assert len(sample.gaps) == 2
        assert all(gap >= 5.0 for gap in sample.gaps)  # 10 ms apart, read as they came
    assert mock.stats.connections == 1  # kept alive
    assert mock.stats.requests == 2


async def test_an_error_status_is_an_error_of_its_kind() -> None:
    mock = MockUpstream()
    await mock.start()
    cfg = LoadConfig(base_url=mock.base_url, model="bench-fail500", svc=False, client="raw")
    one, close = await raw_requests(cfg)
    try:
        failed = await one()
        again = await one()  # on a new connection: the failed one was closed
    finally:
        await close()
        await mock.stop()
    assert failed.error == "http_500"
    assert again.error == "http_500"
