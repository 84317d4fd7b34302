"""svc's upstream HTTP client: HTTP/1.1 on asyncio protocols, responses parsed by llhttp
(``httptools``), a keep-alive pool per provider, forward proxies from the environment.

Why not a general client: reading a token-by-token stream cost aiohttp's client about twice
the CPU per read of this one, and a fast stream about two to three times as much per request
(``python -m tests.perf.reader``). Only what svc needs is here, in layers as httpcore has
them: ``provider`` (one streamed POST per completion) over ``pool`` (keep-alive connections
to one upstream, opened directly or through a proxy) over ``connection`` (one HTTP/1.1
connection, its SSE body turned into pieces as it arrives) and ``tunnel`` (an https upstream
through a proxy's CONNECT).
"""

from app.upstream.http11.provider import StreamingProvider

__all__ = ["StreamingProvider"]
