"""An incremental Server-Sent Events parser shared by the load generator and the tests.

Lines end with LF or CRLF (a lone CR is not treated as a line end: neither svc nor OpenAI
sends one). A blank line dispatches the event; ``data:`` lines are joined with LF; lines
starting with ``:`` are comments; ``event:`` names the event; other fields are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event: its data (data lines joined with LF) and its ``event:`` name."""

    data: str
    event: str | None = None


class SSEParser:
    """Feed bytes as they arrive; get the events they complete."""

    __slots__ = ("_buf", "_data", "_event", "_pending")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []
        self._event: str | None = None
        self._pending = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk`` and return the events it completes (possibly none)."""
        buf = self._buf + chunk if self._buf else chunk
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        events: list[SSEEvent] = []
        for raw in lines:
            event = self._line(raw[:-1] if raw.endswith(b"\r") else raw)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: bytes) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(b":"):
            return None
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value.decode())
            self._pending = True
        elif name == b"event":
            self._event = value.decode()
            self._pending = True
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._pending:
            return None
        event = SSEEvent("\n".join(self._data), self._event)
        self._data, self._event, self._pending = [], None, False
        return event

    @property
    def leftover(self) -> bytes:
        """Bytes of an unfinished line or event (empty when the stream ended cleanly)."""
        if self._pending:
            return b"\n".join(d.encode() for d in self._data) + self._buf or b"<event>"
        return self._buf


def parse_sse(body: bytes) -> list[SSEEvent]:
    """All complete events of a whole SSE body."""
    return SSEParser().feed(body)
