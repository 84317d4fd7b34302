"""One chat completion from reservation to settlement, independent of the HTTP server.

``CompletionService.open`` reserves credits and connects to an upstream (trying the alias's
upstreams in order until one produces its first token); the HTTP layer then sends the
response head and calls ``Completion.relay``. Settlement always runs in a task of its own
that cancellation cannot interrupt, so a dropped client or a cancelled handler can never
leave a reservation open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET

from app.chat.chunks import ChatStream, ChunkEncoder
from app.chat.lifecycle import STREAMS, StreamCut
from app.chat.output import (
    BALANCE_MARK,
    CREDITS_MARK,
    Outcome,
    StreamEnd,
    StreamOutput,
    ending_parts,
    settled_ending,
)
from app.chat.request import ChatParams
from app.chat.router import UpstreamRouter
from app.core.errors import ApiError, ErrorKind
from app.core.ids import completion_ids, random_id
from app.core.interrupts import Interruptible
from app.core.metrics import METRICS
from app.core.settings import HEARTBEATS_PER_DEADLINE
from app.core.tokens import estimate_tokens
from app.credits.idempotency import IdempotencyClaim, RecordedResponse
from app.credits.money import Money
from app.credits.outcomes import Hold, Identity, Refusal, Replay, ScriptStatus, Settlement
from app.keys.refusals import refusal_error
from app.kv.client import REDIS_ERRORS, REDIS_TIMEOUT
from app.kv.fields import USAGE_ESTIMATED, USAGE_UPSTREAM, Served
from app.upstream.base import ChoiceEnd, Piece, UpstreamCall, UpstreamError, Usage
from app.upstream.wire import Delta

SendBytes = Callable[[bytes, bool], Awaitable[None]]
"""Writes response bytes; the flag says whether more will follow (False ends the body)."""
MIN_OUTPUT_TOKENS = 16
# Releasing a reserve whose reply came too late: attempts 0.5, 1.5, 3.5 and 7.5 s after it.
RELEASE_ATTEMPTS = 4
RELEASE_FIRST_PAUSE_S = 0.5
USAGE_WAIT_S = 1.0
"""How long the relay reads on for the upstream's usage report after the output cap (it
comes right after the last token from an upstream that honours max_tokens), or after the
client left (the last output may have been what it got)."""

T = TypeVar("T")
log = logging.getLogger("svc.completions")
_background: set[asyncio.Task[Any]] = set()


def in_background(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Start ``coro`` as a task of its own that no caller's cancellation reaches (graceful
    shutdown waits for it: ``drain_background``)."""
    task = asyncio.ensure_future(coro)
    _background.add(task)
    task.add_done_callback(_finished)
    return task


def _finished(task: asyncio.Task[Any]) -> None:
    _background.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: whoever waited for it reports it, or nobody needs to


async def drain_background() -> None:
    """Wait for settlements still running (graceful shutdown)."""
    while _background:
        await asyncio.gather(*list(_background), return_exceptions=True)


class CompletionService:
    """Opens completions: validates affordability, reserves, connects upstream."""

    def __init__(
        self,
        money: Money,
        router: UpstreamRouter,
        *,
        deadline_s: int,
        recorded_bytes: int = 1 << 20,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``recorded_bytes``: the largest stream an Idempotency-Key's record keeps."""
        self.money = money
        self.router = router
        self.deadline_s = deadline_s
        self.recorded_bytes = recorded_bytes
        self.clock = clock

    async def open(
        self, ident: Identity, params: ChatParams, claim: IdempotencyClaim | None = None
    ) -> Completion | Replay:
        """Reserve credits and start the upstream stream, or raise the ``ApiError`` of the
        reserve's refusal (with ``claim``, an Idempotency-Key: the ``Replay`` of its
        request when that has finished)."""
        alias = params.alias
        max_out = params.max_tokens or alias.default_output_tokens
        min_out = max_out if params.max_tokens else min(MIN_OUTPUT_TOKENS, max_out)
        started = time.monotonic()
        now = self.clock()
        rid = random_id("rsv_", 16)
        try:
            reserved = await self.money.reserve(
                ident,
                rid=rid,
                now=now,
                prompt_units=params.prompt_token_bound * alias.price.input,
                output_price=alias.price.output,
                max_out=max_out,
                min_out=min_out,
                deadline=now + self.deadline_s,
                alias=alias.id,
                requested=params.requested,
                models=params.models,
                api=params.api,
                claim=claim,
            )
        except REDIS_TIMEOUT:
            # Redis was slow, not gone: the reserve may still run, and hold credits for
            # a caller that has answered 503, if its reply came just too late. Release it
            # by its id once Redis answers (nothing changes if it never held anything).
            in_background(self._release_unanswered(ident, rid, reserved_at=now))
            raise
        if isinstance(reserved, Refusal):
            raise refusal_error(reserved)
        if isinstance(reserved, Replay):
            return reserved
        hold = reserved
        METRICS.reserved(ident.environment, hold.amount)
        completion = Completion(self, ident, params, hold, started=started)
        try:
            await completion.connect()
        except BaseException:
            await completion.settle(outcome="released")
            raise
        return completion

    async def _release_unanswered(self, ident: Identity, rid: str, *, reserved_at: float) -> None:
        """Try a few times, further apart each time; past that (Redis still not answering)
        the sweeper refunds the reservation, if one was made, at its deadline."""
        pause_s = RELEASE_FIRST_PAUSE_S
        for _ in range(RELEASE_ATTEMPTS):
            await asyncio.sleep(pause_s)
            try:
                released = await self.money.release_unanswered(
                    ident, rid, reserved_at=reserved_at, now=self.clock()
                )
            except REDIS_ERRORS:
                pause_s *= 2
                continue
            if released.status is ScriptStatus.OK:
                log.info("released a reservation whose reserve was answered too late")
            return


class Completion:
    """A reserved request with a connected upstream, ready to relay."""

    _output: StreamOutput  # what the stream is written as: set by relay()

    def __init__(
        self,
        service: CompletionService,
        ident: Identity,
        params: ChatParams,
        hold: Hold,
        *,
        started: float,
    ) -> None:
        """``started``: the request's start (``time.monotonic()``), for its activity row."""
        self.service = service
        self.started = started
        self.first_output_at = started  # when the upstream's first piece came (connect)
        self._response_id = ""  # the output's, once it relays
        self.ident = ident
        self.params = params
        self.hold = hold
        self.created = int(service.clock())
        self.tokens_received = 0
        self.usage: Usage | None = None
        self._pieces: AsyncIterator[list[Piece]] | None = None
        self._first: list[Piece] = []
        self._upstream_wait = Interruptible()  # ``cut`` interrupts a read in progress
        self._pending: str | Delta | None = None  # output held for the closing chunk
        self._choice_ended = False  # the upstream's finish or usage arrived
        self._tool_calls = False  # the upstream called tools: the stream ends "tool_calls"
        self._cut_short = False  # output was cut at the cap (by svc, or by the upstream)
        self._unsent = b""  # the output's opening, until it goes out with the first write
        self._settling: asyncio.Task[Settlement] | None = None
        self._provider_name = ""
        # why the stream ends at the next chunk boundary: the shutdown's grace period ran
        # out (StreamCut), or the client left (_ClientLeft); the first reason stays
        self._stop: type[StreamCut | _ClientLeft] | None = None
        self._left_at = 0.0  # when the client left (the event loop's clock)
        self._left_timer: asyncio.TimerHandle | None = None
        self._texts: list[str] = []  # the output relayed (its estimate bills a stream unreported)
        self._estimated: int | None = None
        # an Idempotency-Key's request: its stream is kept for replays, and runs to its end
        # whether or not the client stays
        self.record = None
        if hold.idempotency is not None:
            self.record = StreamRecord(service.recorded_bytes)
        self._response: RecordedResponse | None = None  # what settle keeps of it

    def _call(self, model: str) -> UpstreamCall:
        return UpstreamCall(
            model=model,
            request=self.params.request,
            max_tokens=self.hold.out_tokens,
            responses=self.params.native,
        )

    async def connect(self) -> None:
        """Try the alias's upstreams in order until one yields its first piece."""
        candidates = self.service.router.candidates(self.params.alias, self.ident.environment)
        for n, (provider_name, provider, model) in enumerate(candidates):
            if n:
                METRICS.failovers.labels(self.params.alias.id).inc()
            pieces = provider.stream(self._call(model))
            try:
                first: list[Piece] = await anext(pieces, [])
            except UpstreamError as exc:
                await _close(pieces)
                METRICS.upstream_errors.labels(provider_name, "connect").inc()
                log.warning(
                    "upstream failed before its first token",
                    extra={
                        "provider": provider_name,
                        "model": self.params.alias.id,
                        "reason": exc.reason[:200],
                    },
                )
                if exc.client_error:
                    raise ApiError(ErrorKind.INVALID_VALUE, exc.reason) from exc
                continue
            self._provider_name = provider_name
            self._pieces = pieces
            self._first = first
            self.first_output_at = time.monotonic()  # written out as it comes: the TTFB
            return
        raise ApiError(
            ErrorKind.UPSTREAM_UNAVAILABLE,
            "The model is temporarily unavailable. Please retry the request.",
        )

    def chat_stream(self) -> ChatStream:
        """The Chat Completions stream of this completion (``relay``'s default output)."""
        encoder = ChunkEncoder(completion_ids.next(), self.created, self.params.alias.id)
        return ChatStream(
            encoder, requested=self.params.requested, include_usage=self.params.include_usage
        )

    async def relay(self, send: SendBytes, output: StreamOutput | None = None) -> None:
        """Stream the output (as ``output`` writes it: Chat Completions chunks unless told
        otherwise), settle, then send the stream's ending.

        A failing upstream ends the stream with the output's failure. A client that left
        (``client_left``, or a ``send`` that failed) ends it unwritten: the upstream's usage
        report is still read, for at most ``USAGE_WAIT_S``, and what it reports is settled.
        A cancellation settles what was generated and re-raises. Settlement starts before
        the upstream is closed: closing may suspend (httpx's ``aclose``), and a cancellation
        landing there must not be able to skip it.
        """
        self._output = output if output is not None else self.chat_stream()
        self._response_id = self._output.id
        outcome: Outcome = "completed"
        last = ending = b""
        if self.record is not None:
            send = self.record.tee(send)
        lost: LedgerUnreachable | None = None
        left = False
        STREAMS.add(self)
        try:
            last = await self._relay_content(send)
        except LedgerUnreachable as exc:
            lost = exc
        except UpstreamError as exc:
            outcome = "upstream_error"
            METRICS.upstream_errors.labels(self._provider_name, "stream").inc()
            log.warning(
                "upstream failed mid-stream",
                extra={
                    "provider": self._provider_name,
                    "model": self.params.alias.id,
                    "reason": exc.reason[:200],
                },
            )
        except StreamCut:
            outcome = "shutdown"
        except _ClientLeft:
            left = True
            # nobody waits for this settlement: its own callback reports a failure
            self.begin_settle("client_disconnect").add_done_callback(_report_abandoned_settlement)
        except BaseException:
            self.begin_settle("client_disconnect").add_done_callback(_report_abandoned_settlement)
            raise
        finally:
            STREAMS.discard(self)
            try:
                if self._settling is None and lost is None:  # the stream is written whole
                    ending = self._marked_ending(outcome)
                    self._response = self._recorded(self._unsent + last, ending)
            finally:  # whatever writing the ending did, settlement starts
                if lost is None:
                    settling = self.begin_settle(outcome)
                await self._stop_upstream()
        if left:
            return  # nobody to write the ending to
        if lost is not None:
            # the hold could not be kept alive: no settlement is tried, the sweeper
            # refunds it whole once Redis answers again
            await self._end_unsettled(send, b"", lost)
            return
        try:
            settled = await asyncio.shield(settling)
        except REDIS_ERRORS as exc:
            await self._end_unsettled(send, last, exc)
            return
        ending = settled_ending(ending, settled.credits_used, settled.balance)
        await send(self._unsent + last + ending, False)

    async def _end_unsettled(self, send: SendBytes, last: bytes, exc: BaseException) -> None:
        """End a stream Redis failed under (its heartbeat or its settlement) with an error the
        client's SDK raises, instead of a broken connection. Charged at most once: a
        settlement that did run kept its charge; otherwise the hold passes its deadline and
        the sweeper refunds it."""
        cause = exc.__cause__ if isinstance(exc, LedgerUnreachable) else exc
        log.warning(
            "stream ended unsettled on a Redis failure (%s); the sweeper refunds a "
            "reservation left open",
            type(cause).__name__,
        )
        await send(self._unsent + last + self._output.unsettled(), False)

    def _marked_ending(self, outcome: Outcome) -> bytes:
        """The stream's last write, with marks for settlement's numbers (``settled_ending``)."""
        prompt, completion = self.billed_tokens()
        end = StreamEnd(
            outcome=outcome,
            credits_used=CREDITS_MARK,
            balance=BALANCE_MARK,
            prompt_tokens=prompt,
            completion_tokens=completion,
            reported=self.usage,
            capped=self._cut_short
            or (self.tokens_received >= self.hold.out_tokens and not self._choice_ended),
        )
        return self._output.ending(end)

    def _recorded(self, rest: bytes, ending: bytes) -> RecordedResponse | None:
        """What the Idempotency-Key's record keeps of this stream: all of it, when its
        bytes are under the bound (None: no key)."""
        if self.record is None:
            return None
        written = self.record.stop()
        parts = ending_parts(ending)
        if written is None or parts is None:
            return RecordedResponse(None)
        head, middle, tail = parts
        whole = written + rest + head
        numbers = 32  # room for the credits and the balance settle writes in
        if len(whole) + len(middle) + len(tail) + numbers > self.service.recorded_bytes:
            return RecordedResponse(None)
        return RecordedResponse((whole, middle, tail))

    async def _relay_content(self, send: SendBytes) -> bytes:
        """Send the output as it arrives (``_relay_reads``) and return the closing bytes
        (they go out with the ending, after settlement); end it as it was stopped.

        Where finish_reason goes is decided by what arrived: when the upstream's finish (or
        its usage report) comes in the same read as the last output, that output's chunk
        carries it; otherwise a closing empty-content chunk does, as in OpenAI's own
        streams.
        """
        pieces = self._pieces
        assert pieces is not None
        self._unsent = self._output.opening()
        try:
            await self._relay_reads(send, pieces)
        except asyncio.CancelledError:
            if not self._upstream_wait.taken_back():
                raise
            if self._stop is _ClientLeft:
                # the read outlived its bound after the client left: it ended the stream
                raise _ClientLeft from None
            await self._send_pending(send)
            raise StreamCut from None
        except _ClientLeft:
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
        return self._output.closing(self._pending, tool_calls=self._tool_calls)

    async def _relay_reads(self, send: SendBytes, pieces: AsyncIterator[list[Piece]]) -> None:
        """One write per upstream read, until the upstream's end, the output cap, or a stop
        (``cut``, ``client_left``: raised at the next chunk boundary).

        Nothing waits on a timer and no task is made per read: the relay awaits its
        upstream directly.
        """
        heartbeat = _Heartbeat(self)
        batch = self._first
        while True:
            out = self._take(batch)
            if self._unsent:
                out, self._unsent = self._unsent + out, b""
            if out:
                try:
                    await send(out, True)
                except Exception as exc:  # the client went away
                    self._leave()
                    raise _ClientLeft from exc
            if self.tokens_received >= self.hold.out_tokens:
                # generation stops at the reserved output tokens; the usage report that
                # follows them is still read, to bill the upstream's counts
                await self._read_usage(pieces, self._loop_time() + USAGE_WAIT_S)
                return
            if time.monotonic() >= heartbeat.next:
                await heartbeat.beat()
            if self._stop is not None:
                raise self._stop
            self._upstream_wait.enter()
            try:
                batch = await pieces.__anext__()
            except StopAsyncIteration:
                return
            finally:
                self._upstream_wait.leave()

    def cut(self) -> None:
        """End the stream at the next chunk boundary (graceful shutdown, app.chat.lifecycle):
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
            self._stop = _ClientLeft
        return True

    @staticmethod
    def _loop_time() -> float:
        return asyncio.get_running_loop().time()

    async def _send_pending(self, send: SendBytes) -> None:
        if self._pending is not None:
            out, self._unsent = self._unsent + self._flush_pending(), b""
            await send(out, True)

    def _take(self, batch: list[Piece]) -> bytes:
        """The chunks of one read. The last output stays pending when the choice ended in
        the same read (its chunk then carries finish_reason); output past the reserved cap
        is dropped (a usage report after it is kept)."""
        if len(batch) == 1 and self._pending is None:
            piece = batch[0]
            if type(piece) is str:  # one token in one read: the common case, first
                if not piece or self.tokens_received >= self.hold.out_tokens:
                    return b""
                self.tokens_received += 1
                self._texts.append(piece)
                return self._output.piece(piece)
        out: list[bytes] = []
        for piece in batch:
            if isinstance(piece, str):
                if piece and self.tokens_received < self.hold.out_tokens:
                    self._keep_pending(piece, out)
                elif piece:
                    self._cut_short = True
            elif isinstance(piece, Delta):
                self._take_delta(piece, out)
            else:  # the end of the choice, or the usage report that follows it
                self._choice_ended = True
                if isinstance(piece, Usage):
                    self.usage = piece
        if self._pending is not None and not self._choice_ended:
            out.append(self._flush_pending())
        return b"".join(out)

    def _take_delta(self, delta: Delta, out: list[bytes]) -> None:
        if delta.tool_calls is not UNSET or delta.finish_reason == "tool_calls":
            self._tool_calls = True
        if delta.finish_reason == "length":
            self._cut_short = True  # the upstream stopped at the output cap it was sent
        relayed = delta.carries_output() or delta.logprobs is not UNSET
        if relayed and self.tokens_received < self.hold.out_tokens:
            self._keep_pending(msgspec.structs.replace(delta, finish_reason=UNSET), out)
        elif relayed:
            self._cut_short = True

    def _keep_pending(self, piece: str | Delta, out: list[bytes]) -> None:
        """``piece`` becomes the pending one; the one it replaces is written out."""
        if self._pending is not None:
            out.append(self._flush_pending())
        self._pending = piece
        self.tokens_received += 1
        self._texts.append(piece if isinstance(piece, str) else _delta_text(piece))

    async def _read_usage(self, pieces: AsyncIterator[list[Piece]], deadline: float) -> None:
        """Read on, relaying nothing, until the upstream's usage report, the end of its
        stream, or ``deadline`` (the event loop's clock). Output past the cap or past the
        choice's end is dropped and reading goes on; other output means the upstream is
        still generating (for a client that left): the report is not near, reading stops."""
        if self.usage is not None or self._pieces is None:
            return
        # what comes after the relay stopped does not change how the stream ended (a choice
        # end read here past the cap must not turn a cut answer into a complete one)
        ended = self._choice_ended
        with contextlib.suppress(TimeoutError, UpstreamError):
            async with asyncio.timeout_at(deadline):
                async for batch in pieces:
                    for piece in batch:
                        if isinstance(piece, Usage):
                            self.usage = piece
                            return
                        if isinstance(piece, ChoiceEnd):
                            ended = True
                        elif ended or self.tokens_received >= self.hold.out_tokens:
                            continue
                        elif isinstance(piece, str) or piece.carries_output():
                            return

    def _flush_pending(self) -> bytes:
        pending = self._pending
        assert pending is not None
        self._pending = None
        return self._output.piece(pending)

    async def _stop_upstream(self) -> None:
        """Close the upstream's stream (a read it was cancelled in has already ended it)."""
        if self._pieces is not None:
            await _close(self._pieces)

    def billed_tokens(self) -> tuple[int, int]:
        """Prompt and completion tokens to bill: the upstream's report, each count clamped
        to 0 .. what the reservation held for (the prompt's bound, the output cap), so
        whatever an upstream reports, the charge stays within the hold; without a report,
        svc's estimates (``app.core.tokens``) of the prompt and of the output relayed (at
        least a token per piece relayed), clamped the same way."""
        usage = self.usage
        if usage is None:
            if self._estimated is None:  # once: the ending and the settlement both ask
                self._estimated = estimate_tokens("".join(self._texts))
            prompt = min(self.params.prompt_tokens, self.params.prompt_token_bound)
            completion = min(max(self.tokens_received, self._estimated), self.hold.out_tokens)
            return prompt, completion
        prompt = min(max(usage.prompt_tokens, 0), self.params.prompt_token_bound)
        completion = min(max(usage.completion_tokens, self.tokens_received), self.hold.out_tokens)
        return prompt, completion

    def begin_settle(self, outcome: str) -> asyncio.Task[Settlement]:
        """Start closing the reservation for what was generated, in a task no cancellation
        reaches; the first call decides, later ones return the same task."""
        if self._settling is None:
            self._settling = in_background(self._settle(outcome))
        return self._settling

    async def settle(self, *, outcome: str) -> Settlement:
        """Close the reservation and wait for it (idempotent per completion)."""
        return await asyncio.shield(self.begin_settle(outcome))

    async def _settle(self, outcome: str) -> Settlement:
        prompt, completion = self.billed_tokens()
        used = 0 if outcome == "released" else self.params.alias.price.credits(prompt, completion)
        settled = await self.service.money.settle(
            self.hold,
            now=self.service.clock(),
            credits_used=used,
            prompt_tokens=prompt,
            completion_tokens=completion,
            outcome=outcome,
            served=self._served(),
            response=self._response,
        )
        if settled.status is ScriptStatus.OK:
            METRICS.settled(
                outcome, self.ident.environment, used=settled.credits_used, held=self.hold.amount
            )
        return settled

    def _served(self) -> Served:
        """What the request's activity row tells: its response's id, times, usage source."""
        return Served(
            response_id=self._response_id,
            created=self.created,
            ttfb_ms=_ms(self.first_output_at - self.started),
            duration_ms=_ms(time.monotonic() - self.started),
            usage_source=USAGE_ESTIMATED if self.usage is None else USAGE_UPSTREAM,
        )


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def _report_abandoned_settlement(task: asyncio.Task[Settlement]) -> None:
    """One line for a settlement of a stream that is gone (the request's handler, which
    reports the others, has returned)."""
    if task.cancelled():
        return
    exc = task.exception()
    if isinstance(exc, REDIS_ERRORS):
        log.warning(
            "settlement failed (%s): the sweeper refunds the reservation after its deadline",
            type(exc).__name__,
        )
    elif exc is not None:
        log.error("settlement failed", exc_info=exc)


class StreamRecord:
    """The bytes of an idempotent completion's stream as they are written, kept (up to
    ``limit``) for its replays. The writes go on to the client
    while it is there; a client that left stops nothing: the completion runs to its end,
    so a retry gets all of it, charged once."""

    __slots__ = ("_parts", "_size", "client_gone", "kept", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
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

    def stop(self) -> bytes | None:
        """Stop recording; what was written (None: more than the bound)."""
        written = b"".join(self._parts) if self.kept else None
        self.kept, self._parts = False, []
        return written


class _Heartbeat:
    """Extends the reservation's deadline while the stream lives: at most once a third of it."""

    def __init__(self, completion: Completion) -> None:
        self.completion = completion
        self.every = completion.service.deadline_s / HEARTBEATS_PER_DEADLINE
        self.next = time.monotonic() + self.every

    async def beat(self) -> None:
        self.next = time.monotonic() + self.every
        service = self.completion.service
        try:
            await service.money.extend(self.completion.hold, service.clock() + service.deadline_s)
        except REDIS_ERRORS as exc:
            raise LedgerUnreachable from exc


class LedgerUnreachable(Exception):
    """Redis did not answer a stream's heartbeat: its hold may lapse, so the stream ends."""


class _ClientLeft(Exception):
    """Raised inside a relay whose client went away (``Completion.client_left``, or a write
    that failed): the stream ends unwritten and is settled."""


def _delta_text(delta: Delta) -> str:
    """The text a delta carries that its tokens were generated for: content, refusal,
    reasoning, a tool call's name and arguments."""
    parts = [delta.content, delta.refusal, delta.reasoning_content, delta.reasoning]
    if delta.tool_calls is not UNSET:
        for call in delta.tool_calls:
            if call.function is not UNSET:
                parts += [call.function.name, call.function.arguments]
    return "".join(part for part in parts if isinstance(part, str))


async def _close(pieces: AsyncIterator[list[Piece]]) -> None:
    aclose = getattr(pieces, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
