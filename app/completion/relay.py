"""The relay loop of a completion: one write per upstream read, the output cap, where the
choice's end goes, the heartbeat, and the stops that end a stream at a chunk boundary (a
cut at shutdown, a client that left), after which the upstream's usage report is still read
for at most ``USAGE_WAIT_S``.

``app.completion.completion.Completion`` holds one ``Relay`` per stream; the per-chunk code
reads and writes the relay's own slots, with no object in between to look up on every chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
from msgspec import UNSET

from app.completion.output import StreamOutput
from app.completion.settlement import Heartbeat
from app.core.errors import LedgerUnreachable, StreamCut, UpstreamError
from app.core.interrupts import Interruptible
from app.upstream.base import ChoiceEnd, Piece, StartUsage, Usage
from app.upstream.wire import Delta

SendBytes = Callable[[bytes, bool], Awaitable[None]]
"""Writes response bytes; the flag says whether more will follow (False ends the body)."""
USAGE_WAIT_S = 1.0
"""How long the relay reads on for the upstream's usage report after the output cap (it
comes right after the last token from an upstream that honours max_tokens), or after the
client left (the last output may have been what it got)."""


class ClientLeft(Exception):
    """Raised inside a relay whose client went away (``Relay.client_left``, or a write
    that failed): the stream ends unwritten and is settled."""


class Relay:
    """The relay of one connected upstream's stream (``Completion.relay`` makes it, once the
    stream's output is chosen): what was relayed (the tokens against the cap, their text for
    an estimate, the upstream's usage report, how the choice ended) and how the relay stops.

    The per-chunk loop reads and writes this object's own slots only: what it needs of the
    completion (its output cap, its heartbeat) is given here, once."""

    __slots__ = (
        "_cap",
        "_first",
        "_heartbeat",
        "_left_at",
        "_left_timer",
        "_output",
        "_pending",
        "_pieces",
        "_stop",
        "_upstream_wait",
        "choice_ended",
        "cut_short",
        "finish_reason",
        "stop_sequence",
        "texts",
        "tokens_received",
        "tool_calls",
        "unsent",
        "usage",
    )

    def __init__(
        self,
        pieces: AsyncIterator[list[Piece]],
        first: list[Piece],
        output: StreamOutput,
        *,
        out_tokens: int,
        heartbeat: Heartbeat,
    ) -> None:
        """``pieces``: the upstream's stream, after its ``first`` read (``Completion.connect``);
        ``output``: what the stream is written as; ``out_tokens``: the hold's output cap."""
        self._pieces = pieces
        self._first = first
        self._output = output
        self._cap = out_tokens
        self._heartbeat = heartbeat
        self.tokens_received = 0  # output pieces relayed, against the cap
        # the upstream's usage report, once read (or the StartUsage it began with)
        self.usage: Usage | None = None
        self.texts: list[str] = []  # the output relayed (its estimate bills a stream unreported)
        self._upstream_wait = Interruptible()  # ``cut`` interrupts a read in progress
        self._pending: str | Delta | None = None  # output held for the closing chunk
        self.choice_ended = False  # the upstream's finish or usage arrived
        self.tool_calls = False  # the upstream called tools: the stream ends "tool_calls"
        self.cut_short = False  # output was cut at the cap (by svc, or by the upstream)
        # how the upstream said the choice ended, when it said more than "stop": its
        # finish_reason (a Delta's), and the stop sequence it named (a ChoiceEnd's)
        self.finish_reason: str | None = None
        self.stop_sequence: str | None = None
        self.unsent = b""  # the output's opening (``run``), until it goes out with the first write
        # why the stream ends at the next chunk boundary: the shutdown's grace period ran out
        # (StreamCut), or the client left (ClientLeft); the first reason stays
        self._stop: type[StreamCut | ClientLeft] | None = None
        self._left_at = 0.0  # when the client left (the event loop's clock; 0: it has not)
        # interrupts a read that outlives USAGE_WAIT_S after the client left
        self._left_timer: asyncio.TimerHandle | None = None

    @property
    def capped(self) -> bool:
        """Whether the output was cut at the cap (by svc, or by the upstream), or reached it
        before the choice's end."""
        return self.cut_short or (self.tokens_received >= self._cap and not self.choice_ended)

    async def run(self, send: SendBytes) -> bytes:
        """Send the output as it arrives (``_relay_reads``) and return the closing bytes
        (they go out with the ending, after settlement); end it as it was stopped.

        Where finish_reason goes is decided by what arrived: when the upstream's finish (or
        its usage report) comes in the same read as the last output, that output's chunk
        carries it; otherwise a closing empty-content chunk does, as in OpenAI's own
        streams.
        """
        pieces = self._pieces
        first = self._first  # a StartUsage comes first in the first read, if at all
        started = first[0] if first and type(first[0]) is StartUsage else None
        self.unsent = self._output.opening(started)
        try:
            await self._relay_reads(send, pieces)
        except asyncio.CancelledError:
            if not self._upstream_wait.taken_back():
                raise
            if self._stop is ClientLeft:
                # the read outlived its bound after the client left: it ended the stream
                raise ClientLeft from None
            await self._send_pending(send)
            raise StreamCut from None
        except ClientLeft:
            # the report may be what comes next (the last output came alone, or the cap
            # was reached): read on for it within the bound, then settle it
            await self._read_usage(pieces, self._left_at + USAGE_WAIT_S)
            raise
        except (UpstreamError, StreamCut, LedgerUnreachable):
            await self._send_pending(send)
            raise
        finally:
            if self._left_timer is not None:
                self._left_timer.cancel()
        return self._output.closing(self._pending, tool_calls=self.tool_calls)

    async def _relay_reads(self, send: SendBytes, pieces: AsyncIterator[list[Piece]]) -> None:
        """One write per upstream read, until the upstream's end, the output cap, or a stop
        (``cut``, ``client_left``: raised at the next chunk boundary).

        Nothing waits on a timer and no task is made per read: the relay awaits its
        upstream directly.
        """
        heartbeat, cap, upstream_wait = self._heartbeat, self._cap, self._upstream_wait
        batch = self._first
        while True:
            out = self._take(batch)
            if self.unsent:
                out, self.unsent = self.unsent + out, b""
            if out:
                try:
                    await send(out, True)
                except Exception as exc:  # the client went away
                    self._leave()
                    raise ClientLeft from exc
            if self.tokens_received >= cap:
                # generation stops at the reserved output tokens; the usage report that
                # follows them is still read, to bill the upstream's counts
                await self._read_usage(pieces, self._loop_time() + USAGE_WAIT_S)
                return
            if time.monotonic() >= heartbeat.next:
                await heartbeat.beat()
            if self._stop is not None:
                raise self._stop
            upstream_wait.enter()
            try:
                batch = await pieces.__anext__()
            except StopAsyncIteration:
                return
            finally:
                upstream_wait.leave()

    def cut(self) -> None:
        """End the stream at the next chunk boundary (graceful shutdown, app.completion.lifecycle):
        a read in progress is interrupted, a write in progress finishes first."""
        if self._stop is None:
            self._stop = StreamCut
        self._upstream_wait.interrupt()

    def client_left(self) -> None:
        """The client went away (the HTTP layer's disconnect watcher tells): the stream ends
        at the next chunk boundary, unwritten, and is settled. Nothing is cancelled: a read
        of the upstream in progress may bring its usage report (the last output may have
        been what the client got), so it may finish, within ``USAGE_WAIT_S``; past that it
        is interrupted. A write in progress finishes (or fails) first."""
        if not self._leave():
            return
        if self._upstream_wait.waiting:
            loop = asyncio.get_running_loop()
            self._left_timer = loop.call_at(
                self._left_at + USAGE_WAIT_S, self._upstream_wait.interrupt
            )

    def _leave(self) -> bool:
        """Note that the client left, once; False when it was already noted."""
        if self._left_at:
            return False
        self._left_at = self._loop_time()
        if self._stop is None:
            self._stop = ClientLeft
        return True

    @staticmethod
    def _loop_time() -> float:
        return asyncio.get_running_loop().time()

    async def _send_pending(self, send: SendBytes) -> None:
        if self._pending is not None:
            out, self.unsent = self.unsent + self._flush_pending(), b""
            await send(out, True)

    def _take(self, batch: list[Piece]) -> bytes:
        """The chunks of one read. The last output stays pending when the choice ended in
        the same read (its chunk then carries finish_reason); output past the reserved cap
        is dropped (a usage report after it is kept)."""
        if len(batch) == 1 and self._pending is None:
            piece = batch[0]
            if type(piece) is str:  # one token in one read: the common case, first
                if not piece or self.tokens_received >= self._cap:
                    return b""
                self.tokens_received += 1
                self.texts.append(piece)
                return self._output.piece(piece)
        out: list[bytes] = []
        for piece in batch:
            if isinstance(piece, str):
                if piece and self.tokens_received < self._cap:
                    self._keep_pending(piece, out)
                elif piece:
                    self.cut_short = True
            elif isinstance(piece, Delta):
                self._take_delta(piece, out)
            else:
                self._take_report(piece)
        if self._pending is not None and not self.choice_ended:
            out.append(self._flush_pending())
        return b"".join(out)

    def _take_report(self, piece: Usage | ChoiceEnd) -> None:
        """The end of the choice, the usage report that follows it, or the counts the stream
        began with (``StartUsage``: the choice goes on)."""
        if type(piece) is StartUsage:
            self.usage = piece
            return
        self.choice_ended = True
        if isinstance(piece, Usage):
            self.usage = piece
        elif piece.stop_sequence is not None:
            self.stop_sequence = piece.stop_sequence

    def _take_delta(self, delta: Delta, out: list[bytes]) -> None:
        finish = delta.finish_reason
        if delta.tool_calls is not UNSET or finish == "tool_calls":
            self.tool_calls = True
        if finish is not UNSET:
            self.finish_reason = finish
            if finish == "length":
                self.cut_short = True  # the upstream stopped at the output cap it was sent
        relayed = delta.carries_output() or delta.logprobs is not UNSET
        if relayed and self.tokens_received < self._cap:
            self._keep_pending(msgspec.structs.replace(delta, finish_reason=UNSET), out)
        elif relayed:
            self.cut_short = True

    def _keep_pending(self, piece: str | Delta, out: list[bytes]) -> None:
        """``piece`` becomes the pending one; the one it replaces is written out."""
        if self._pending is not None:
            out.append(self._flush_pending())
        self._pending = piece
        self.tokens_received += 1
        self.texts.append(piece if isinstance(piece, str) else _delta_text(piece))

    def _flush_pending(self) -> bytes:
        pending = self._pending
        assert pending is not None
        self._pending = None
        return self._output.piece(pending)

    async def _read_usage(self, pieces: AsyncIterator[list[Piece]], deadline: float) -> None:
        """Read on, relaying nothing, until the upstream's usage report, the end of its
        stream, or ``deadline`` (the event loop's clock). Output past the cap or past the
        choice's end is dropped and reading goes on; other output means the upstream is
        still generating (for a client that left): the report is not near, reading stops."""
        usage = self.usage
        if usage is not None and type(usage) is not StartUsage:
            return
        # what comes after the relay stopped does not change how the stream ended (a choice
        # end read here past the cap must not turn a cut answer into a complete one)
        ended = self.choice_ended
        with contextlib.suppress(TimeoutError, UpstreamError):
            async with asyncio.timeout_at(deadline):
                async for batch in pieces:
                    for piece in batch:
                        if type(piece) is StartUsage:
                            self.usage = piece  # the report at the end may still come
                        elif isinstance(piece, Usage):
                            self.usage = piece
                            return
                        elif isinstance(piece, ChoiceEnd):
                            ended = True
                        elif ended or self.tokens_received >= self._cap:
                            continue
                        elif isinstance(piece, str) or piece.carries_output():
                            return


def _delta_text(delta: Delta) -> str:
    """The text a delta carries that its tokens were generated for: content, refusal,
    reasoning, a tool call's name and arguments."""
    parts = [delta.content, delta.refusal, delta.reasoning_content, delta.reasoning]
    if delta.tool_calls is not UNSET:
        for call in delta.tool_calls:
            if call.function is not UNSET:
                parts += [call.function.name, call.function.arguments]
    return "".join(part for part in parts if isinstance(part, str))
