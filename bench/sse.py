"""An incremental Server-Sent Events parser shared by the load generator and the tests.

Lines end with LF or CRLF (a lone CR is not treated as a line end: neither svc nor OpenAI
sends one). A blank line dispatches the event; ``data:`` lines are joined with LF; lines
starting with ``:`` are comments; ``event:`` names the event; other fields are ignored.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class SSEEvent(NamedTuple):
    """One dispatched event: its data (data lines joined with LF) and its ``event:`` name.
    (A tuple: a frozen dataclass cost more to make than parsing the event.)"""

    data: str
    event: str | None = None


class SSEParser:
    """Feed bytes as they arrive; get the events they complete.

    Bytes are kept until the blank line that ends their event, then the event is read at
    once, the common forms by one regular expression: a load generator reads every event of
    every stream it drives, on the cores the server under test runs on, so this is kept
    short (a line-by-line state machine cost twice as much for chat streams, three times as
    much for Responses streams)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk`` and return the events it completes (possibly none)."""
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            # a CR at the very end may be half of a CRLF: it waits for the next chunk
            if buf.endswith(b"\r"):
                buf = buf[:-1].replace(b"\r\n", b"\n") + b"\r"
            else:
                buf = buf.replace(b"\r\n", b"\n")
        events: list[SSEEvent] = []
        simple = _SIMPLE.match
        pos = 0
        while True:
            found = simple(buf, pos)
            if found is not None:
                name = found.group(1)
                data = found.group(2).decode()
                events.append(SSEEvent(data, None if name is None else name.decode()))
                pos = found.end()
                continue
            end = buf.find(b"\n\n", pos)
            if end < 0:
                break
            event = _event(buf[pos:end])
            if event is not None:
                events.append(event)
            pos = end + 2
        self._buf = buf[pos:]
        return events

    @property
    def leftover(self) -> bytes:
        """Bytes of an unfinished line or event (empty when the stream ended cleanly)."""
        return self._buf if self._buf.strip(b"\n") else b""


# The events svc and OpenAI send: one data line, maybe after a name line. Anything else
# (comments, several data lines, other fields) is read line by line (``_event``).
_SIMPLE = re.compile(rb"(?:event: ([^\n]*)\n)?data: ([^\n]*)\n\n")


def _event(block: bytes) -> SSEEvent | None:
    """The event of the lines before one blank line; None when they carry neither data nor
    a name (comments, blank lines, other fields)."""
    data: list[str] = []
    name: str | None = None
    for line in block.split(b"\n"):
        field, colon, value = line.partition(b":")
        if not colon or not field:
            continue  # a blank line, a comment, or a field without a value
        if value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            data.append(value.decode())
        elif field == b"event":
            name = value.decode()
    if not data and name is None:
        return None
    return SSEEvent("\n".join(data), name)


def parse_sse(body: bytes) -> list[SSEEvent]:
    """All complete events of a whole SSE body."""
    return SSEParser().feed(body)
