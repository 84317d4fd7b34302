"""Idempotency-Key in the reserve and settle scripts: one request per key and account runs
and is charged; sent again it is replayed from the record, refused while running, refused
with another body; a request that charged nothing frees its key."""

from __future__ import annotations

import pytest
from cryptography.exceptions import InvalidTag

from app.core.errors import ApiError, ErrorKind
from app.credits import idempotency
from app.credits.idempotency import (
    AnswerSeal,
    IdempotencyClaim,
    RecordedAnswer,
    RecordedResponse,
)
from app.credits.outcomes import Hold, Identity, Refusal, Replay
from app.credits.sweeper import Sweeper
from app.keys.refusals import refusal_error
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, pools, reserve, reserved, snapshot

PEPPER = b"pepper"


ROUTE = "/v1/chat/completions"
BODY = b'{"model":"svc-fast","messages":[{"role":"user","content":"hi"}]}'
PARTS = (b'data: {"x":1}\n\ndata: {"svc":{"credits_used":', b',"balance_remaining":', b"}}\n\n")


def _claim(
    ledger: Ledgers, ident: Identity, key_: str = "k-1", body: bytes = BODY
) -> IdempotencyClaim:
    return idempotency.claim(
        ledger.layout, ident.pid, key_, ROUTE, body, environment="live", pepper=PEPPER
    )


async def _settle(
    ledger: Ledgers, hold: Hold, now: float, *, used: int, response: RecordedResponse | None
) -> int:
    settled = await ledger.holds.settle(
        hold,
        now=now,
        credits_used=used,
        prompt_tokens=1,
        completion_tokens=used,
        outcome="completed",
        response=response,
    )
    return settled.balance


async def _refused(
    ledger: Ledgers, ident: Identity, claim: IdempotencyClaim, now: float
) -> ApiError:
    before = await snapshot(ledger)
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r-again", now, claim=claim)
    assert await snapshot(ledger) == before
    return info.value


async def test_a_finished_request_is_replayed_byte_for_byte_and_charged_once(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1")
    claim = _claim(ledger, ident)
    hold = await reserve(ledger, ident, "r1", clock(), max_out=10, claim=claim)
    # while it runs: 409, and the SDKs' retry waits a second
    running = await _refused(ledger, ident, claim, clock())
    assert (running.kind, running.status, running.headers["retry-after"]) == (
        ErrorKind.IDEMPOTENCY_IN_PROGRESS,
        409,
        "1",
    )
    balance = await _settle(ledger, hold, clock(), used=7, response=RecordedResponse(PARTS))
    assert balance == 993
    before = await snapshot(ledger)
    for n in range(3):
        replay = await reserved(ledger, ident, f"r-replay{n}", clock(), claim=claim)
        assert replay == Replay(PARTS[0] + b"7" + PARTS[1] + b"993" + PARTS[2])
    assert await snapshot(ledger) == before  # nothing held, counted or charged
    assert await pools(ledger, "acct_A") == (0, 993)


async def test_a_streams_record_is_sealed_and_replayed_byte_for_byte(
    ledger: Ledgers, clock: Clock
) -> None:
    """Redis keeps no byte of the stream readable, only the two numbers settle writes in;
    the replay is still exactly what the client got."""
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1")
    claim = _claim(ledger, ident)
    hold = await reserve(ledger, ident, "r1", clock(), max_out=10, claim=claim)
    sealed = RecordedResponse(claim.seal.seal_stream(PARTS))
    assert await _settle(ledger, hold, clock(), used=7, response=sealed) == 993
    kept = await ledger.redis.hget(claim.record, "body")
    assert kept is not None
    for part in PARTS:
        assert part.strip(b"\n") not in kept
    assert b"data:" not in kept
    assert b"svc" in kept  # the mark of a sealed record, nothing of the stream
    replay = await reserved(ledger, ident, "r-replay", clock(), claim=claim)
    assert replay == Replay(PARTS[0] + b"7" + PARTS[1] + b"993" + PARTS[2])


async def test_a_stream_record_that_does_not_open_is_a_final_409(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1")
    claim = _claim(ledger, ident)
    hold = await reserve(ledger, ident, "r1", clock(), max_out=10, claim=claim)
    sealed = RecordedResponse(claim.seal.seal_stream(PARTS))
    await _settle(ledger, hold, clock(), used=7, response=sealed)
    # another pepper (a rotated SVC_KEY_PEPPER) cannot open it: no replay of garbage
    other = claim._replace(seal=AnswerSeal(b"another pepper", ident.pid, "k-1"))
    refused = await _refused(ledger, ident, other, clock())
    assert (refused.kind, refused.status) == (ErrorKind.IDEMPOTENCY_UNAVAILABLE, 409)
    # nor can a record changed in Redis
    kept = await ledger.redis.hget(claim.record, "body")
    await ledger.redis.hset(claim.record, "body", kept[:-1] + bytes([kept[-1] ^ 1]))
    refused = await _refused(ledger, ident, claim, clock())
    assert refused.kind is ErrorKind.IDEMPOTENCY_UNAVAILABLE
    assert await pools(ledger, "acct_A") == (0, 993)  # charged once, never again


def test_a_sealed_stream_opens_around_the_numbers_settle_wrote() -> None:
    seal = AnswerSeal(b"pepper", "acct_A", "k-1")
    head, middle, tail = seal.seal_stream(PARTS)
    assert len(head) + len(middle) + len(tail) == (
        sum(map(len, PARTS)) + idempotency.SEALED_STREAM_OVERHEAD
    )
    # a part may hold any byte, the separator and digits included
    odd = (b"|123|" * 50, b"\x00|9", b"")
    a, b, c = seal.seal_stream(odd)
    assert seal.open_stream(a + b"4" + b + b"56" + c) == odd[0] + b"4" + odd[1] + b"56" + odd[2]
    assert seal.open_stream_or_none(a + b"x" + b + b"56" + c) is None  # not a number
    assert seal.open_stream_or_none(a + b"4" + b + b"56" + c + b"!") is None  # trailing
    assert seal.open_stream(b"data: [DONE]\n\n") == b"data: [DONE]\n\n"  # before sealing


async def test_another_body_or_route_with_the_key_is_a_422(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1")
    hold = await reserve(ledger, ident, "r1", clock(), claim=_claim(ledger, ident))
    other_body = _claim(ledger, ident, body=BODY.replace(b"hi", b"ho"))
    other_route = idempotency.claim(
        ledger.layout,
        ident.pid,
        "k-1",
        "/v1/responses",
        BODY,
        environment="live",
        pepper=PEPPER,
    )
    for claim in (other_body, other_route):
        refused = await _refused(ledger, ident, claim, clock())
        assert (refused.kind, refused.status) == (ErrorKind.IDEMPOTENCY_KEY_REUSED, 422)
    await _settle(ledger, hold, clock(), used=3, response=RecordedResponse(PARTS))
    refused = await _refused(ledger, ident, other_body, clock())
    assert refused.kind is ErrorKind.IDEMPOTENCY_KEY_REUSED


async def test_keys_belong_to_an_account(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    await account(ledger, "acct_B", purchased=1_000)
    mine = await key(ledger, "acct_A", "k1")
    yours = await key(ledger, "acct_B", "k2")
    await reserve(ledger, mine, "r1", clock(), claim=_claim(ledger, mine))
    await reserve(ledger, yours, "r2", clock(), claim=_claim(ledger, yours))  # same key


async def test_a_request_that_charged_nothing_frees_its_key(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1")
    claim = _claim(ledger, ident)
    hold = await reserve(ledger, ident, "r1", clock(), claim=claim)
    await ledger.holds.settle(
        hold, now=clock(), credits_used=0, prompt_tokens=0, completion_tokens=0, outcome="released"
    )
    assert await ledger.redis.exists(claim.record) == 0
    again = await reserve(ledger, ident, "r2", clock(), max_out=5, claim=claim)
    assert again.amount == 5


async def test_the_sweeper_frees_the_key_of_a_request_whose_worker_died(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1")
    claim = _claim(ledger, ident)
    await reserve(ledger, ident, "r1", clock(), claim=claim, deadline=clock() + 5)
    clock.advance(10)
    assert await Sweeper(ledger.holds, interval_s=1, clock=clock).sweep_once() == 1
    assert await ledger.redis.exists(claim.record) == 0
    assert await pools(ledger, "acct_A") == (0, 1_000)
    await reserve(ledger, ident, "r2", clock(), claim=claim)


async def test_a_response_not_kept_is_a_final_409(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1")
    claim = _claim(ledger, ident)
    hold = await reserve(ledger, ident, "r1", clock(), claim=claim)
    await _settle(ledger, hold, clock(), used=4, response=RecordedResponse(None))
    refused = await _refused(ledger, ident, claim, clock())
    assert (refused.kind, refused.status, refused.headers["x-should-retry"]) == (
        ErrorKind.IDEMPOTENCY_UNAVAILABLE,
        409,
        "false",
    )
    assert await pools(ledger, "acct_A") == (0, 996)  # charged once, never again


async def test_the_record_lives_a_day(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    ident = await key(ledger, "acct_A", "k1")
    claim = _claim(ledger, ident)
    hold = await reserve(ledger, ident, "r1", clock(), claim=claim)
    await _settle(ledger, hold, clock(), used=2, response=RecordedResponse(PARTS))
    assert 86_000 < await ledger.redis.ttl(claim.record) <= idempotency.TTL_S


async def test_refusals_leave_no_record(ledger: Ledgers, clock: Clock) -> None:
    await account(ledger, "acct_A", purchased=3)
    ident = await key(ledger, "acct_A", "k1")
    claim = _claim(ledger, ident)
    with pytest.raises(ApiError) as info:
        await reserve(ledger, ident, "r1", clock(), max_out=10, claim=claim)
    assert info.value.kind is ErrorKind.INSUFFICIENT_CREDITS
    assert await ledger.redis.exists(claim.record) == 0
    await reserve(ledger, ident, "r2", clock(), max_out=3, claim=claim)  # with credits: runs


@pytest.mark.parametrize("value", ["", "x" * 256, "tab\there", "naïve"])
def test_a_bad_key_is_a_400_naming_the_header(value: str) -> None:
    with pytest.raises(ApiError) as info:
        idempotency.check_key(value)
    assert (info.value.status, info.value.param) == (400, "Idempotency-Key")


# -- the JSON routes' claim and close scripts ---------------------------------------------------


def _json_claim(ledger: Ledgers, body: bytes) -> IdempotencyClaim:
    """A JSON route's claim on the key ``k`` of ``acct_A``."""
    return idempotency.claim(
        ledger.layout, "acct_A", "k", "/v1/api-keys", body, environment="live", pepper=PEPPER
    )


async def test_a_claimed_key_answers_until_closed_then_replays(ledger: Ledgers) -> None:
    claim = _json_claim(ledger, b"{}")
    assert await ledger.idempotency.claim(claim, "run-1") is None
    running = await ledger.idempotency.claim(claim, "run-2")
    assert isinstance(running, Refusal)
    assert refusal_error(running).kind is ErrorKind.IDEMPOTENCY_IN_PROGRESS
    await ledger.idempotency.close(claim, "run-2", RecordedAnswer(201, b"not mine"))  # ignored
    await ledger.idempotency.close(claim, "run-1", RecordedAnswer(201, b"\x00sealed\xff"))
    assert await ledger.idempotency.claim(claim, "run-3") == RecordedAnswer(201, b"\x00sealed\xff")
    other = _json_claim(ledger, b"{ }")
    reused = await ledger.idempotency.claim(other, "run-4")
    assert isinstance(reused, Refusal)
    assert refusal_error(reused).kind is ErrorKind.IDEMPOTENCY_KEY_REUSED
    assert 86_000 < await ledger.redis.ttl(claim.record) <= idempotency.TTL_S


async def test_a_failed_run_frees_its_key(ledger: Ledgers) -> None:
    claim = _json_claim(ledger, b"{}")
    assert await ledger.idempotency.claim(claim, "run-1") is None
    await ledger.idempotency.close(claim, "run-1", None)
    assert await ledger.idempotency.claim(claim, "run-2") is None


def test_sealed_answers_open_only_with_their_key() -> None:
    sealed = AnswerSeal(b"pepper", "acct_A", "k-1").seal(b'{"key":"svc_live_secret"}')
    assert b"secret" not in sealed
    assert AnswerSeal(b"pepper", "acct_A", "k-1").unseal(sealed) == b'{"key":"svc_live_secret"}'
    others = [
        (b"other", "acct_A", "k-1"),
        (b"pepper", "acct_B", "k-1"),
        (b"pepper", "acct_A", "k-2"),
    ]
    for pepper, pid, idem_key in others:
        with pytest.raises(InvalidTag):
            AnswerSeal(pepper, pid, idem_key).unseal(sealed)


def test_the_records_claim_a_request_in_their_key_space_under_their_pepper(
    ledger: Ledgers,
) -> None:
    """What HTTP (and the streams) hand over: the account, the key, the route and the body;
    the records add the key space and the pepper themselves."""
    made = ledger.idempotency.claim_for("acct_A", "k", "/v1/api-keys", b"{}", environment="live")
    expected = _json_claim(ledger, b"{}")
    assert made[:2] == expected[:2]
    assert made.seal.unseal(expected.seal.seal(b"answer")) == b"answer"
    with pytest.raises(ApiError):
        ledger.idempotency.claim_for("acct_A", "", "/v1/api-keys", b"{}", environment="live")
