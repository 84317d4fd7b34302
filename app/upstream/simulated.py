"""The built-in simulated upstream: deterministic text streamed token by token, no network.

Used by default, by test keys always, and by tests. The reply is a function of the prompt,
so the same conversation always streams the same tokens.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator

from app.core.tokens import estimate_prompt_tokens
from app.upstream.base import Piece, UpstreamCall, Usage
from app.upstream.wire import message_text

_WORDS = [
    "svc",
    "simulated",
    "reply:",
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "credits",
    "are",
    "reserved",
    "before",
    "work",
    "starts",
    "and",
    "settled",
    "after,",
    "so",
    "none",
    "is",
    "ever",
    "lost",
    "doubled",
    "or",
    "overspent",
    "and",
    "every",
    "stream",
    "ends",
    "with",
    "one",
    "metadata",
    "chunk",
]


class SimulatedProvider:
    """Streams ``reply_tokens`` words (fewer when max_tokens is lower)."""

    def __init__(self, reply_tokens: int = 24, delay_ms: float = 0.0) -> None:
        self.reply_tokens = reply_tokens
        self.delay_s = delay_ms / 1000

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        texts = [message_text(m) for m in call.request.messages]
        start = zlib.crc32("\n".join(texts).encode()) % len(_WORDS)
        count = min(self.reply_tokens, call.max_tokens)
        words: list[Piece] = [
            (" " if i else "") + _WORDS[(start + i) % len(_WORDS)] for i in range(count)
        ]
        usage = Usage(prompt_tokens=estimate_prompt_tokens(texts), completion_tokens=count)
        if not self.delay_s:
            yield [*words, usage]  # all of it is there at once, like one fast network read
            return
        for word in words:
            await asyncio.sleep(self.delay_s)
            yield [word]
        yield [usage]

    async def close(self) -> None:
        return None
