"""Parsing the OpenAI chat completion stream an upstream sends."""

from __future__ import annotations

import msgspec

from app.upstream.base import Piece, UpstreamError, Usage


class _Delta(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []
    usage: _Usage | None = None
    error: object | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
DONE = object()


def parse_data_line(line: bytes) -> str | Usage | object | None:
    """One line of an upstream SSE stream: content text, a ``Usage``, ``DONE``, or None for
    lines that carry nothing for svc (comments, blank lines, role-only deltas)."""
    if not line.startswith(b"data:"):
        return None
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return DONE
    try:
        chunk = _decode_chunk(payload)
    except msgspec.DecodeError as exc:
        raise UpstreamError("malformed chunk from upstream") from exc
    if chunk.error is not None:
        raise UpstreamError("upstream reported an error mid-stream")
    if chunk.usage is not None and not chunk.choices:
        return Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
    for choice in chunk.choices:
        if choice.delta is not None and choice.delta.content:
            return choice.delta.content
    if chunk.usage is not None:
        return Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
    return None


class LineSplitter:
    """Turns the bytes of an upstream SSE stream, read in any sizes, into the pieces they
    complete. ``done`` is set once ``data: [DONE]`` arrived."""

    __slots__ = ("_rest", "done")

    def __init__(self) -> None:
        self._rest = b""
        self.done = False

    def feed(self, data: bytes) -> list[Piece]:
        """The pieces completed by ``data`` (maybe none); nothing after ``[DONE]``."""
        if self._rest:
            data = self._rest + data
        lines = data.split(b"\n")
        self._rest = lines.pop()
        pieces: list[Piece] = []
        for line in lines:
            item = parse_data_line(line)
            if item is None:
                continue
            if item is DONE:
                self.done = True
                break
            pieces.append(item)  # type: ignore[arg-type]
        return pieces
