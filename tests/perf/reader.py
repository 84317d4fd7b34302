"""What reading an upstream stream costs per chunk, client side only:
``python -m tests.perf.reader`` (here, not in bench/: it measures svc's upstream clients
in process, which the benchmark, using svc only through its public surface, may not).

The mock (a process of its own) streams ``tokensNxMS`` completions; this process opens C of
them at once and reads every chunk with one of several readers, then prints the CPU this
process spent per chunk read (user + system, all chunks of all streams). Nothing is relayed:
the figures are the read path's own cost, the part of svc's per-chunk CPU that the
upstream client decides.

Readers:
- ``svc``: svc's upstream client (``app.upstream.http11``), ``StreamingProvider.stream``,
  read to the end (its reads, timeouts, SSE parsing into pieces).
- ``aiohttp``: ``content.readany()`` with a sock_read timeout (svc's upstream client before
  it had its own), the bytes dropped: a general client's reads, without parsing.
- ``aiohttp-no-sock-read``: the same reads with no sock_read timeout (aiohttp re-arms a
  timer on every received packet when it is set).
- ``raw``: a bare asyncio protocol on a socket of its own, HTTP written by hand, bytes
  counted: the floor any HTTP client on this event loop can reach.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import msgspec

from app.upstream.base import Provider, UpstreamCall
from app.upstream.config import ProviderConfig
from app.upstream.http11 import StreamingProvider
from app.upstream.wire import ChatRequest, Message
from bench.mock_upstream import start_in_subprocess

BODY = msgspec.json.encode(
    {"model": "", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _body(model: str) -> bytes:
    return BODY.replace(b'"model":""', b'"model":' + msgspec.json.encode(model))


async def _aiohttp_stream(session: aiohttp.ClientSession, url: str, model: str) -> int:
    reads = 0
    async with session.post(url, data=_body(model)) as response:
        content = response.content
        while data := await content.readany():
            reads += 1
            if data.endswith(b"data: [DONE]\n\n"):
                break
    return reads


async def _svc_stream(provider: Provider, model: str) -> int:
    request = ChatRequest(model=model, messages=[Message(role="user", content="hi")])
    call = UpstreamCall(model=model, request=request, max_tokens=4096)
    return sum([1 async for _ in provider.stream(call)])


class _Counter(asyncio.Protocol):
    def __init__(self, done: asyncio.Future[int]) -> None:
        self.done = done
        self.reads = 0

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        if b"data: [DONE]" in data and not self.done.done():
            self.done.set_result(self.reads)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(self.reads)


async def _raw_stream(host: str, port: int, model: str) -> int:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()
    transport, _ = await loop.create_connection(lambda: _Counter(done), host, port)
    body = _body(model)
    transport.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (host.encode(), len(body), body)
    )
    try:
        return await done
    finally:
        transport.close()


async def _measure(concurrency: int, streams: int, run_one: Callable[[], Awaitable[int]]) -> Any:
    semaphore = asyncio.Semaphore(concurrency)

    async def bounded() -> int:
        async with semaphore:
            return await run_one()

    cpu0, t0 = _cpu(), time.perf_counter()
    reads = sum(await asyncio.gather(*(bounded() for _ in range(streams))))
    return reads, _cpu() - cpu0, time.perf_counter() - t0


async def run_reader(reader: str, url: str, model: str, concurrency: int, streams: int) -> Any:
    host, port = url.split("//")[1].split("/")[0].split(":")
    if reader == "raw":
        return await _measure(concurrency, streams, lambda: _raw_stream(host, int(port), model))
    if reader == "svc":
        config = ProviderConfig(base_url=url, max_connections=concurrency)
        provider: Provider = StreamingProvider(config)
        try:
            return await _measure(concurrency, streams, lambda: _svc_stream(provider, model))
        finally:
            await provider.close()
    sock_read = None if reader == "aiohttp-no-sock-read" else 60.0
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=sock_read)
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, auto_decompress=False
    ) as session:
        target = url + "/chat/completions"
        return await _measure(concurrency, streams, lambda: _aiohttp_stream(session, target, model))


READERS = ("svc", "aiohttp", "aiohttp-no-sock-read", "raw")


def measure(concurrency: int, streams: int, chunks: int, delay_ms: int, rounds: int) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    mock = start_in_subprocess()
    model = f"bench-tokens{chunks}x{delay_ms}"
    try:
        print(f"C={concurrency}, {streams} streams of {chunks} chunks {delay_ms} ms apart")
        print("| reader | round | reads | CPU µs per read |\n|---|--:|--:|--:|")
        for n in range(rounds):
            for reader in READERS:  # interleaved rounds: the machine's drift hits all alike
                reads, cpu, _wall = asyncio.run(
                    run_reader(reader, mock.base_url, model, concurrency, streams)
                )
                print(f"| {reader} | {n + 1} | {reads:,} | {cpu / max(reads, 1) * 1e6:.1f} |")
    finally:
        mock.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.perf.reader", description=__doc__)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--delay-ms", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    measure(args.concurrency, args.streams, args.chunks, args.delay_ms, args.rounds)


if __name__ == "__main__":
    main()
