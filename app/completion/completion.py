"""One completion, of any API, from its upstream's first piece to its stream's ending, independent
of the HTTP server.

``app.completion.service.CompletionService.open`` reserves credits and makes a ``Completion``,
which connects to an upstream (``connect``); the HTTP layer then sends the response head
and calls ``Completion.relay``: the relay loop (its ``app.completion.relay.Relay``), then
settlement (its ``app.completion.settlement.HoldSettlement``: in a task of its own that
cancellation cannot interrupt, so a dropped client or a cancelled handler can never leave a
reservation open), then the stream's ending with settlement's numbers in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Protocol

from app.completion.lifecycle import STREAMS
from app.completion.observer import AnsweredHook, CompletionObserver, CompletionObservers
from app.completion.output import (
    BALANCE_MARK,
    CREDITS_MARK,
    Outcome,
    StreamEnd,
    StreamOutput,
    settled_ending,
)
from app.completion.record import StreamRecord
from app.completion.relay import ClientLeft, Relay, SendBytes
from app.completion.request import CompletionRequest
from app.completion.router import UpstreamRouter
from app.completion.settlement import (
    NOTHING_RELAYED,
    Heartbeat,
    HoldSettlement,
    Relayed,
    ServedBy,
    SettlementTerms,
    in_background,
    report_abandoned_settlement,
    usage_source,
)
from app.core.errors import ApiError, ErrorKind, LedgerUnreachable, StreamCut, UpstreamError
from app.core.metrics import FIRST_TOKEN, METRICS, MID_STREAM
from app.credits.idempotency import AnswerSeal, RecordedResponse
from app.credits.outcomes import Hold, Identity, Settlement
from app.kv.client import REDIS_ERRORS
from app.upstream.base import Piece, UpstreamCall

log = logging.getLogger("svc.completions")
_FAILED = {
    FIRST_TOKEN: "upstream failed before its first token",
    MID_STREAM: "upstream failed mid-stream",
}
_UNOBSERVED: tuple[bytes, AnsweredHook | None] = (b"", None)  # an attempt's call, unwatched


class CompletionTerms(SettlementTerms, Protocol):
    """What a completion uses of the service that opened it (``CompletionService``)."""

    router: UpstreamRouter
    recorded_bytes: int
    observers: CompletionObservers | None


class Completion:
    """A reserved request with a connected upstream, ready to relay: it holds its settlement
    (``HoldSettlement``, made with it) and, once its stream starts, its relay (``Relay``)."""

    service: CompletionTerms

    def __init__(
        self,
        service: CompletionTerms,
        ident: Identity,
        params: CompletionRequest,
        hold: Hold,
        *,
        started: float,
        seal: AnswerSeal | None = None,
    ) -> None:
        """``started``: the request's start (``time.monotonic()``), for its activity row;
        ``seal``: its Idempotency-Key's (with ``hold.idempotency``), which its record is
        sealed with."""
        self.service = service
        self.started = started
        self.ident = ident
        self.params = params
        self.hold = hold
        self.created = int(service.clock())
        self.settlement = HoldSettlement(
            service, ident, params, hold, started=started, created=self.created
        )
        # the upstream that serves, its stream and that stream's first read (connect)
        self.served_by: ServedBy | None = None
        self._pieces: AsyncIterator[list[Piece]] | None = None
        self._first: list[Piece] = []
        self._relay: Relay | None = None  # the stream's relay, once it runs
        self._response_id = ""  # the output's, once it relays
        self._settling: asyncio.Task[Settlement] | None = None  # once begun (begin_settle)
        # an Idempotency-Key's request: its stream is kept for replays, and runs to its end
        # whether or not the client stays
        self.record = None
        if hold.idempotency is not None:
            assert seal is not None, "an Idempotency-Key's hold comes with its seal"
            self.record = StreamRecord(service.recorded_bytes, seal)
        self._response: RecordedResponse | None = None  # what settle keeps of it
        # its watcher (traces on), asked for once: without one, each step it would be told
        # of costs a check of None
        observers = service.observers
        self.observer: CompletionObserver | None = (
            None if observers is None else observers.observe(self)
        )

    @property
    def stops_when_client_leaves(self) -> bool:
        """Whether the relay stops when its client leaves (``client_left``): a completion
        with an Idempotency-Key runs to its end (its record keeps the whole stream for the
        retry); the others stop there."""
        return self.record is None

    @property
    def failovers(self) -> int:
        """The upstreams failed over from before the one that served."""
        return 0 if self.served_by is None else self.served_by.failovers

    @property
    def first_output_at(self) -> float:
        """When the upstream's first piece came (``time.monotonic()``; unconnected: the start)."""
        return self.started if self.served_by is None else self.served_by.first_output_at

    @property
    def response_id(self) -> str:
        """The id of the output it relays ("" before the relay starts)."""
        return self._response_id

    @property
    def relayed(self) -> Relayed:
        """What the relay counted (before it ran: nothing)."""
        return NOTHING_RELAYED if self._relay is None else self._relay

    def _call(self, provider_name: str, model: str) -> UpstreamCall:
        """What an attempt sends to ``provider_name`` (its ``model``); an observer is told
        the attempt starts, and gives the headers it carries."""
        observer = self.observer
        headers, answered = (
            _UNOBSERVED if observer is None else observer.attempt_started(provider_name)
        )
        return UpstreamCall(
            model=model,
            request=self.params.request,
            max_tokens=self.hold.out_tokens,
            native=self.params.native,
            headers=headers,
            answered=answered,
        )

    async def connect(self) -> None:
        """Try the alias's upstreams in order until one yields its first piece."""
        candidates = self.service.router.candidates(self.params.alias, self.ident.environment)
        for n, (provider_name, provider, model, cost) in enumerate(candidates):
            if n:
                METRICS.failover(self.params.alias.id)
            pieces = provider.stream(self._call(provider_name, model))
            try:
                first: list[Piece] = await anext(pieces, [])
            except UpstreamError as exc:
                await _close(pieces)
                self._upstream_failed(provider_name, FIRST_TOKEN, exc)
                if exc.client_error:
                    raise ApiError(ErrorKind.INVALID_VALUE, exc.reason) from exc
                continue
            METRICS.attempt_served(provider_name)
            # each candidate before this one failed and was passed over; the first piece
            # is written out as it comes: its time is the TTFB
            self.served_by = ServedBy(
                provider_name, model, cost, failovers=n, first_output_at=time.monotonic()
            )
            self._pieces = pieces
            self._first = first
            return
        raise ApiError(
            ErrorKind.UPSTREAM_UNAVAILABLE,
            "The model is temporarily unavailable. Please retry the request.",
        )

    def _upstream_failed(self, provider_name: str, phase: str, exc: UpstreamError) -> None:
        """An upstream's failure before its first token (``FIRST_TOKEN``: the next one is
        tried) or mid-stream (``MID_STREAM``), counted and logged."""
        METRICS.upstream_failed(provider_name, phase, exc.outcome)
        log.warning(
            _FAILED[phase],
            extra={
                "provider": provider_name,
                "model": self.params.alias.id,
                "reason": exc.reason[:200],
            },
        )
        if self.observer is not None:
            self.observer.attempt_failed(exc.outcome)

    def stream_output(self) -> StreamOutput:
        """This completion's stream as its API writes it (``relay``'s default output)."""
        return self.params.output(self.params, self.created)

    def cut(self) -> None:
        """End the stream at the next chunk boundary (``Relay.cut``; graceful shutdown)."""
        if self._relay is not None:
            self._relay.cut()

    def client_left(self) -> None:
        """The client went away (``Relay.client_left``). Only a relay that runs is told:
        the HTTP layer starts watching for this after the relay started, and the relay is
        made before the relay task's first suspension."""
        if self._relay is not None:
            self._relay.client_left()

    async def relay(self, send: SendBytes, output: StreamOutput | None = None) -> None:
        """Stream the output (as ``output`` writes it: the request's API's unless told
        otherwise), settle, then send the stream's ending.

        A failing upstream ends the stream with the output's failure. A client that left
        (``client_left``, or a ``send`` that failed) ends it unwritten: the upstream's usage
        report is still read, for at most ``relay.USAGE_WAIT_S``, and what it reports is settled.
        A cancellation settles what was generated and re-raises. Settlement starts before
        the upstream is closed: closing may suspend (httpx's ``aclose``), and a cancellation
        landing there must not be able to skip it.
        """
        served_by = self.served_by
        assert self._pieces is not None, "relayed once connected"
        assert served_by is not None
        output = output if output is not None else self.stream_output()
        self._response_id = output.id
        relay = self._relay = Relay(
            self._pieces,
            self._first,
            output,
            out_tokens=self.hold.out_tokens,
            heartbeat=Heartbeat(self.service, self.hold),
        )
        outcome: Outcome = "completed"
        last = ending = b""
        send = send if self.record is None else self.record.tee(send)
        lost: LedgerUnreachable | None = None
        left = False
        STREAMS.add(self)
        try:
            last = await relay.run(send)
        except LedgerUnreachable as exc:
            lost = exc
        except UpstreamError as exc:
            outcome = "upstream_error"
            self._upstream_failed(served_by.provider, MID_STREAM, exc)
        except StreamCut:
            outcome = "shutdown"
        except ClientLeft:
            left = True
            # nobody waits for this settlement: its own callback reports a failure
            self.begin_settle("client_disconnect").add_done_callback(report_abandoned_settlement)
        except BaseException:
            self.begin_settle("client_disconnect").add_done_callback(report_abandoned_settlement)
            raise
        finally:
            STREAMS.discard(self)
            try:
                if self._settling is None and lost is None:  # the stream is written whole
                    ending = self._marked_ending(relay, output, outcome)
                    self._response = self._recorded(relay.unsent + last, ending)
            finally:  # whatever writing the ending did, settlement starts
                settling = None if lost is not None else self.begin_settle(outcome)
                await self._stop_upstream()
        if lost is not None:
            # the hold could not be kept alive: no settlement is tried, the sweeper
            # refunds it whole once Redis answers again
            await self._end_unsettled(send, relay.unsent + output.unsettled(), lost)
        elif not left:  # a client that left has nobody to write the ending to
            assert settling is not None, "begun: the hold was kept alive"
            try:
                settled = await asyncio.shield(settling)
            except REDIS_ERRORS as exc:
                await self._end_unsettled(send, relay.unsent + last + output.unsettled(), exc)
            else:
                ending = settled_ending(ending, settled.credits_used, settled.balance)
                await send(relay.unsent + last + ending, False)
        if self.observer is not None:
            await self.observer.relay_ended(self._settling)

    async def _end_unsettled(self, send: SendBytes, rest: bytes, exc: BaseException) -> None:
        """End a stream Redis failed under (its heartbeat or its settlement) with an error the
        client's SDK raises, instead of a broken connection. Charged at most once: a
        settlement that did run kept its charge; otherwise the hold passes its deadline and
        the sweeper refunds it. ``rest``: what is left to write, the output's failure last."""
        cause = exc.__cause__ if isinstance(exc, LedgerUnreachable) else exc
        log.warning(
            "stream ended unsettled on a Redis failure (%s); the sweeper refunds a "
            "reservation left open",
            type(cause).__name__,
        )
        await send(rest, False)

    def _marked_ending(self, relay: Relay, output: StreamOutput, outcome: Outcome) -> bytes:
        """The stream's last write, with marks for settlement's numbers (``settled_ending``)."""
        prompt, completion = self.billed_tokens()
        end = StreamEnd(
            outcome=outcome,
            credits_used=CREDITS_MARK,
            balance=BALANCE_MARK,
            prompt_tokens=prompt,
            completion_tokens=completion,
            reported=relay.usage,
            capped=relay.capped,
            finish_reason=relay.finish_reason,
            stop_sequence=_sent_stop(relay.stop_sequence, self.params.request.stop),
        )
        return output.ending(end)

    def _recorded(self, rest: bytes, ending: bytes) -> RecordedResponse | None:
        """What the Idempotency-Key's record keeps of this stream (None: no key)."""
        return None if self.record is None else self.record.response(rest, ending)

    async def _stop_upstream(self) -> None:
        """Close the upstream's stream (a read it was cancelled in has already ended it)."""
        if self._pieces is not None:
            await _close(self._pieces)

    def billed_tokens(self) -> tuple[int, int]:
        """Prompt and completion tokens to bill (``HoldSettlement.billed_tokens``)."""
        return self.settlement.billed_tokens(self.relayed)

    @property
    def usage_source(self) -> str:
        """Whose counts were billed: the upstream's, or svc's estimate."""
        return usage_source(self.relayed.usage)

    def begin_settle(self, outcome: str) -> asyncio.Task[Settlement]:
        """Start closing the reservation for what was generated, in a task no cancellation
        reaches; the first call decides, later ones return the same task."""
        if self._settling is None:
            observer = self.observer
            self._settling = in_background(
                self._settle(outcome)
                if observer is None
                else self._observed_settle(observer, outcome)
            )
        return self._settling

    async def settle(self, *, outcome: str) -> Settlement:
        """Close the reservation and wait for it (idempotent per completion)."""
        return await asyncio.shield(self.begin_settle(outcome))

    async def _settle(self, outcome: str) -> Settlement:
        return await self.settlement.settle(
            outcome,
            self.relayed,
            self.served_by,
            response_id=self._response_id,
            response=self._response,
        )

    async def _observed_settle(self, observer: CompletionObserver, outcome: str) -> Settlement:
        """``_settle``, with ``observer`` told when it starts and what it closed."""
        observer.settling()
        try:
            settled = await self._settle(outcome)
        except BaseException:
            observer.settled(outcome, None)
            raise
        observer.settled(outcome, settled)
        return settled


def _sent_stop(matched: str | None, stop: object) -> str | None:
    """``matched`` when it is one of the stop sequences the request sent (``stop``, a string
    or a list of them); None otherwise (an upstream may name a stop of its own, as vLLM does
    a stop token's text)."""
    if matched is None:
        return None
    if matched == stop or (isinstance(stop, list) and matched in stop):
        return matched
    return None


async def _close(pieces: AsyncIterator[list[Piece]]) -> None:
    aclose = getattr(pieces, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
