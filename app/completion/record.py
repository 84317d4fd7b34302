"""The stream an Idempotency-Key's record keeps: the bytes of an idempotent completion as
they are written, and what settlement stores of them for its replays (``RecordedResponse``:
the stream whole, split around the marks where settle writes the credits charged and the
balance, so a replay is byte for byte what the client got).
"""

from __future__ import annotations

from app.completion.output import ending_parts
from app.completion.relay import SendBytes
from app.credits.idempotency import SEALED_STREAM_OVERHEAD, AnswerSeal, RecordedResponse

NUMBERS_ROOM = 32
"""Bytes kept free under the bound for the credits and the balance settle writes in."""


class StreamRecord:
    """The bytes of an idempotent completion's stream as they are written, kept (up to
    ``limit``) for its replays. The writes go on to the client
    while it is there; a client that left stops nothing: the completion runs to its end,
    so a retry gets all of it, charged once."""

    __slots__ = ("_parts", "_seal", "_size", "client_gone", "kept", "limit")

    def __init__(self, limit: int, seal: AnswerSeal) -> None:
        self.limit = limit
        self._seal = seal
        self._parts: list[bytes] = []
        self._size = 0
        self.kept = True  # False once the stream outgrew the bound (or the record stopped)
        self.client_gone = False

    def tee(self, send: SendBytes) -> SendBytes:
        """``send``, recording what it writes and outliving the client."""

        async def write(data: bytes, more: bool) -> None:
            if self.kept:
                self._size += len(data)
                self._parts.append(data)
                if self._size > self.limit:
                    self.kept, self._parts = False, []
            if self.client_gone:
                return
            try:
                await send(data, more)
            except Exception:  # the client went away: the stream goes on without it
                self.client_gone = True

        return write

    def response(self, rest: bytes, ending: bytes) -> RecordedResponse:
        """Stop recording, and what the record keeps of the stream: all of it (what was
        written, ``rest`` not yet written, the marked ``ending``) when that is under the
        bound; otherwise nothing of it. Sealed: Redis keeps no byte of the stream readable."""
        written = b"".join(self._parts) if self.kept else None  # None: more than the bound
        self.kept, self._parts = False, []
        parts = ending_parts(ending)
        if written is None or parts is None:
            return RecordedResponse(None)
        head, middle, tail = parts
        whole = written + rest + head
        size = len(whole) + len(middle) + len(tail) + NUMBERS_ROOM + SEALED_STREAM_OVERHEAD
        if size > self.limit:
            return RecordedResponse(None)
        return RecordedResponse(self._seal.seal_stream((whole, middle, tail)))
