"""``Idempotency-Key``: per account, environment and key, a request runs once for 24 hours;
sent again with the same body it gets the first one's response back, charged nothing
(Stripe's rules).

A record belongs to one environment (``live``, ``test``, or ``OPERATOR`` for the admin API):
its Redis key and its fingerprint both name it, so a test key's simulated answer is never
replayed to a live key (which must be served and charged), nor the reverse, and an
operator's request never takes an account's key.

For completions the check and the record ride in the reserve and settle scripts
(``reserve.lua``, ``settle.lua``: their headers say how); this module names the record,
says what identifies a request (``IdempotencyRecords.claim_for``, for the streams and the
other routes alike), and runs the other routes once per key (``IdempotencyRecords.once``:
their records claimed, replayed, kept and freed).

When a JSON route's answer cannot be recorded (Redis fails as the run closes its key, or an
answer is over the bound), what the request did stands and its answer is sent: undoing it
(a key or webhook revoked, a grant taken back) could fail the same way, and a 503 for a
request that did its work would leave a resource nobody knows the secret of. The key is
freed instead, so the client is never left with a key that answers 409 for a day: at once
when Redis answers, else when the claim lapses (``RUNNING_TTL_S``, a minute). A retry with
that key then runs again, as one without a key would.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

import msgspec

from app.core.clock import DAY_S
from app.core.errors import invalid_value
from app.core.ids import random_id
from app.credits.outcomes import Refusal, ScriptStatus
from app.credits.script_args import ScriptArgs
from app.credits.scripts import Scripts
from app.kv.client import REDIS_ERRORS
from app.kv.layout import KeySpace

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

log = logging.getLogger("svc.idempotency")
T = TypeVar("T")

HEADER = "idempotency-key"
SHOWN = "Idempotency-Key"  # the header as errors name it (their param)
TTL_S = DAY_S
"""How long a key's record (and a response) is kept."""
MAX_KEY_CHARS = 255
OPERATOR = "operator"
"""The environment of the admin API's records: an operator's requests, apart from the keys'."""
RUNNING_TTL_S = 60
"""How long a JSON route's claim lives while its request runs (closing it sets ``TTL_S``): a
run whose close never reached Redis (its worker killed, Redis failed over under it) leaves
its key taken this long at most, so a client's or an operator's retry waits a minute, not a
day. A JSON route's run is a few Redis and store calls, each bounded by its timeout, far
inside it; and a grant or debit a retry ran beside a run still going is applied once by its
entry id anyway."""
IDEMPOTENCY_CLAIM = ScriptArgs("idempotency_claim", "fp", "token", "ttl")
IDEMPOTENCY_CLOSE = ScriptArgs("idempotency_close", "token", "outcome", "status", "body", "ttl")
ANSWER_MARGIN_BYTES = 65_536
"""What a JSON route's answer may hold beyond what its request sent (ids, secrets, times)."""


class AnswerSeal:
    """The cipher of one Idempotency-Key's recorded answers (AES-256-GCM, the nonce in front
    of each sealed piece): derived from the client's key, which svc does not keep, so Redis
    alone never reads an answer. A JSON route's answer (a new key's secret is one) is
    sealed whole; a stream's in the three parts settle writes the credits charged and the
    balance between (``seal_stream``), so a replay is still byte for byte what the client
    got, and its model output is not in Redis either."""

    __slots__ = ("_cipher",)

    def __init__(self, pepper: bytes, pid: str, key: str) -> None:
        # imported by the first request with an Idempotency-Key, not by every worker at
        # start: cryptography costs about 7 MB of RSS per worker (bench/CHANGELOG.md, issue 53)
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        material = hmac.new(pepper, f"idempotency\0{pid}\0{key}".encode(), hashlib.sha256)
        self._cipher: AESGCM = AESGCM(material.digest())

    def seal(self, answer: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + self._cipher.encrypt(nonce, answer, None)

    def unseal(self, sealed: bytes) -> bytes:
        """What ``seal`` sealed; ``cryptography``'s ``InvalidTag`` if it was changed."""
        return self._cipher.decrypt(sealed[:12], sealed[12:], None)

    def seal_stream(self, parts: tuple[bytes, bytes, bytes]) -> tuple[bytes, bytes, bytes]:
        """A stream's three parts as settle writes them, a number between each two: each
        sealed and framed by its length, so ``open_stream`` can tell them from the numbers."""
        head, middle, tail = (_framed(self.seal(part)) for part in parts)
        return SEALED_STREAM + head, _NUMBER_END + middle, _NUMBER_END + tail

    def open_stream_or_none(self, recorded: bytes) -> bytes | None:
        """``open_stream``, or None for a record that does not open (changed, or sealed
        under another pepper): a replay is then answered as if none had been kept."""
        from cryptography.exceptions import InvalidTag  # loaded by __init__'s import

        try:
            return self.open_stream(recorded)
        except (InvalidTag, ValueError):
            log.warning("an Idempotency-Key's stream record does not open; it counts as none")
            return None

    def open_stream(self, recorded: bytes) -> bytes:
        """The stream a record keeps, as its client got it. A record written before streams
        were sealed (within its day of life after an upgrade) is the stream itself."""
        if not recorded.startswith(SEALED_STREAM):
            return recorded
        head, at = _unframed(recorded, len(SEALED_STREAM))
        end = recorded.index(_NUMBER_END, at)
        credits = recorded[at:end]
        middle, at = _unframed(recorded, end + 1)
        end = recorded.index(_NUMBER_END, at)
        balance = recorded[at:end]
        tail, at = _unframed(recorded, end + 1)
        if at != len(recorded) or not (credits.isdigit() and balance.isdigit()):
            raise ValueError("not a sealed stream record")
        return self.unseal(head) + credits + self.unseal(middle) + balance + self.unseal(tail)


SEALED_STREAM = b"svc-sealed-stream/1\n"
"""How a sealed stream record starts (a stream itself starts with ``data:``)."""
_NUMBER_END = b"|"
_LENGTH_DIGITS = 10
SEALED_STREAM_OVERHEAD = len(SEALED_STREAM) + 3 * (_LENGTH_DIGITS + 28) + 2
"""What sealing adds to a stream's record: the mark, and each part's length, nonce and tag."""


def _framed(sealed: bytes) -> bytes:
    return b"%0*d" % (_LENGTH_DIGITS, len(sealed)) + sealed


def _unframed(recorded: bytes, at: int) -> tuple[bytes, int]:
    """The framed piece at ``at``, and where what follows it starts."""
    length = recorded[at : at + _LENGTH_DIGITS]
    if not length.isdigit():
        raise ValueError("not a sealed stream record")
    start = at + _LENGTH_DIGITS
    end = start + int(length)
    return recorded[start:end], end


class IdempotencyClaim(NamedTuple):
    """A request's claim on its Idempotency-Key, and the seal of what its record keeps."""

    record: str  # the Redis key of the key's record
    fingerprint: str  # what the request is: its route and body, hashed
    seal: AnswerSeal


class RecordedAnswer(NamedTuple):
    """The answer of a route other than the streams, as its key's record keeps it."""

    status: int
    body: bytes


class Answered(NamedTuple, Generic[T]):
    """What a JSON route answers: ``answer`` with ``status``, ``replayed`` when it is the
    answer its key's first request got (decoded from its record; nothing ran again)."""

    answer: T
    status: int
    replayed: bool


class RecordedResponse(NamedTuple):
    """What settle keeps of a response: its bytes in three parts, the credits charged going
    between the first two and the balance after between the last two; None: not kept."""

    parts: tuple[bytes, bytes, bytes] | None


def check_key(value: str) -> str:
    """The header's value, or the 400 naming it: 1 to 255 printable ASCII characters."""
    if not 0 < len(value) <= MAX_KEY_CHARS or not (value.isascii() and value.isprintable()):
        raise invalid_value(
            SHOWN,
            f"The {SHOWN} header must be 1 to {MAX_KEY_CHARS} printable ASCII characters.",
        )
    return value


def key_digest(value: str) -> str:
    """The name a key's record is kept under (the client's key itself is not stored)."""
    return hashlib.sha256(value.encode()).hexdigest()


def fingerprint(environment: str, route: str, body: bytes) -> str:
    """What makes two requests the same request: the environment, the route and the exact
    body."""
    return hashlib.sha256(f"{environment}\n{route}\n".encode() + body).hexdigest()


def claim(
    layout: KeySpace,
    pid: str,
    key: str,
    route: str,
    body: bytes,
    *,
    environment: str,
    pepper: bytes,
) -> IdempotencyClaim:
    """The claim of a request (to ``route``, with ``body``, by a key of ``environment`` or
    by an ``OPERATOR``) on the Idempotency-Key ``key`` of the account ``pid``, or the 400
    when ``key`` is not one."""
    digest = key_digest(check_key(key))
    record = layout.idempotency(layout.shard(pid), pid, environment, digest)
    return IdempotencyClaim(
        record, fingerprint(environment, route, body), AnswerSeal(pepper, pid, key)
    )


def grant_id(pid: str, key: str | None, kind: str = "grant") -> str | None:
    """The grant id of an operator's grant sent with the Idempotency-Key ``key`` (None: no
    key, the grant gets a random id). The grant scripts apply a grant id once (for 400
    days), so the credits are added once however the key's record fares: a record that
    could not be written (its key freed), or one written under another name by an older
    svc, lets the request run again, and its grant is then a no-op."""
    if key is None:
        return None
    digest = hashlib.sha256(f"{pid}\n{check_key(key)}".encode()).hexdigest()[:32]
    return f"{kind}_idem_{digest}"


def answer_limit(max_body_bytes: int) -> int:
    """The largest answer a JSON route's record keeps, for a request-size limit of
    ``max_body_bytes``: an answer echoes at most what its request sent (JSON strings are
    never longer in the answer than in the request), plus fields of its own (ids, a secret,
    times), so twice the limit and ``ANSWER_MARGIN_BYTES`` bound every answer a route
    produces, sealed (28 bytes more) included."""
    return 2 * max_body_bytes + ANSWER_MARGIN_BYTES


class IdempotencyRecords:
    """The Idempotency-Key records: where a request's record is and what seals it
    (``claim_for``, every route's), and, for the routes other than the streams, the record
    claimed before a request runs and closed with its answer after (``keep``), or freed
    (``free``). ``max_body_bytes``: the request-size limit, which bounds the answers kept
    (``answer_limit``)."""

    def __init__(
        self, scripts: Scripts, layout: KeySpace, pepper: bytes, *, max_body_bytes: int
    ) -> None:
        self._run = scripts.run
        self._layout = layout
        self._pepper = pepper
        self._answer_limit = answer_limit(max_body_bytes)

    def claim_for(
        self, pid: str, key: str, route: str, body: bytes, *, environment: str
    ) -> IdempotencyClaim:
        """``claim`` in this deployment's key space and under its pepper: the claim of a
        request to ``route`` with ``body`` on the Idempotency-Key ``key`` of the account
        ``pid`` in ``environment``, or the 400 when ``key`` is not one."""
        return claim(
            self._layout, pid, key, route, body, environment=environment, pepper=self._pepper
        )

    async def claim(self, claim: IdempotencyClaim, token: str) -> RecordedAnswer | Refusal | None:
        """Claim ``claim``'s key for the run ``token`` (None; the claim lapses after
        ``RUNNING_TTL_S`` unless closed), or the answer its first request recorded, or the
        ``Refusal`` when it is running or was another request's."""
        state, *answer = await self._run(
            "idempotency_claim",
            [claim.record],
            IDEMPOTENCY_CLAIM(fp=claim.fingerprint, token=token, ttl=RUNNING_TTL_S),
        )
        if state == ScriptStatus.OK:
            return None
        if state == ScriptStatus.REPLAY:
            body, status = answer
            return RecordedAnswer(int(status), bytes(body))
        return Refusal(ScriptStatus(state), 0, 0.0)

    async def close(
        self, claim: IdempotencyClaim, token: str, answer: RecordedAnswer | None
    ) -> None:
        """Record the answer of the run ``token`` for ``claim``'s key, or (None: it failed)
        free the key."""
        args = IDEMPOTENCY_CLOSE(token=token, outcome="failed")
        if answer is not None:
            args = IDEMPOTENCY_CLOSE(
                token=token, outcome="done", status=answer.status, body=answer.body, ttl=TTL_S
            )
        await self._run("idempotency_close", [claim.record], args)

    async def keep(self, claim: IdempotencyClaim, token: str, status: int, answer: bytes) -> bool:
        """Record ``answer`` (the run ``token``'s JSON, answered with ``status``), sealed, for
        ``claim``'s key; whether it was kept. One over ``answer_limit``, or one Redis fails
        to record, is not: the key is freed instead (``free``; see the module docstring)."""
        sealed = claim.seal.seal(answer)
        if len(sealed) > self._answer_limit:
            log.warning("idempotent answer of %d bytes not kept; its key is freed", len(sealed))
            await self.free(claim, token)
            return False
        try:
            # shielded: a client that leaves now still finds its answer when it retries
            await asyncio.shield(self.close(claim, token, RecordedAnswer(status, sealed)))
        except REDIS_ERRORS as exc:
            log.warning("idempotent answer not recorded (%s); its key is freed", type(exc).__name__)
            await self.free(claim, token)
            return False
        return True

    async def free(self, claim: IdempotencyClaim, token: str) -> None:
        """Free ``claim``'s key of the run ``token`` (it failed, or its answer is not kept);
        when Redis fails here too, the claim lapses on its own (``RUNNING_TTL_S``) and the
        request's own outcome stands."""
        try:
            await asyncio.shield(self.close(claim, token, None))
        except REDIS_ERRORS as exc:
            log.warning("idempotency key not freed (%s); its claim lapses", type(exc).__name__)

    async def once(
        self,
        claim: IdempotencyClaim,
        answer: tuple[int, type[T]],
        run: Callable[[], Awaitable[T]],
    ) -> Answered[T] | Refusal:
        """``run``'s answer (``answer``: its status and type) once per ``claim``'s key: the
        answer its first request got when it ran before, the ``Refusal`` while it runs or
        when it was another request's. A run that fails frees the key (it did nothing: the
        request sent again runs); one that succeeds keeps its answer (``keep``)."""
        status, kind = answer
        token = random_id("run_", 16)
        recorded = await self.claim(claim, token)
        if isinstance(recorded, Refusal):
            return recorded
        if recorded is not None:
            kept = claim.seal.unseal(recorded.body)
            replay = msgspec.json.decode(kept, type=kind)
            return Answered(replay, recorded.status, replayed=True)
        try:
            result = await run()
        except BaseException:
            await self.free(claim, token)
            raise
        await self.keep(claim, token, status, msgspec.json.encode(result))
        return Answered(result, status, replayed=False)
