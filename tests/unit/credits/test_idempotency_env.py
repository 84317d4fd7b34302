"""Issue 30 items 3 and 9: an Idempotency-Key's record belongs to one environment (a test
key's simulated answer is never replayed to a live key, nor the reverse; an operator's
request never takes an account's key), a JSON route's answer of any size is kept, and a
failure to record it frees the key instead of leaving it taken for a day."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from app.core.settings import Settings
from app.credits import idempotency
from app.credits.idempotency import (
    IdempotencyClaim,
    IdempotencyRecords,
    RecordedAnswer,
    RecordedResponse,
)
from app.credits.outcomes import Identity, Replay
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, pools, reserve, reserved
from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401 (fixtures)

PEPPER = b"pepper"


pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)

ROUTE = "/v1/chat/completions"
BODY = b'{"model":"svc-fast","messages":[{"role":"user","content":"hi"}]}'
PARTS = (b'data: {"x":1}\n\ndata: {"svc":{"credits_used":', b',"balance_remaining":', b"}}\n\n")


def _claim(ledger: Ledgers, ident: Identity, key_: str = "k-1") -> IdempotencyClaim:
    return idempotency.claim(
        ledger.layout, ident.pid, key_, ROUTE, BODY, environment=ident.environment, pepper=PEPPER
    )


async def _served(ledger: Ledgers, ident: Identity, rid: str, now: float, used: int) -> None:
    """Reserve with the key ``k-1`` (its record must not answer: a replay fails), and
    settle at ``used`` credits, the response kept."""
    hold = await reserve(ledger, ident, rid, now, max_out=10, claim=_claim(ledger, ident))
    await ledger.holds.settle(
        hold,
        now=now,
        credits_used=used,
        prompt_tokens=1,
        completion_tokens=used,
        outcome="completed",
        response=RecordedResponse(PARTS),
    )


def test_the_environment_names_the_record_and_is_in_the_fingerprint() -> None:
    from app.kv.layout import KeySpace

    layout = KeySpace("svc", 64)
    claims = {
        env: idempotency.claim(layout, "acct_A", "k", ROUTE, BODY, environment=env, pepper=PEPPER)
        for env in ("live", "test", idempotency.OPERATOR)
    }
    assert len({c.record for c in claims.values()}) == 3
    assert len({c.fingerprint for c in claims.values()}) == 3
    assert claims["test"].record.endswith(":idem:acct_A:test:" + idempotency.key_digest("k"))


async def test_a_test_keys_stream_is_not_replayed_to_a_live_key(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    test = await key(ledger, "acct_A", "kt", environment="test")
    live = await key(ledger, "acct_A", "kl")
    await _served(ledger, test, "r1", clock(), used=7)
    assert await pools(ledger, "acct_A") == (0, 1_000)  # a test key deducts nothing
    await _served(ledger, live, "r2", clock(), used=5)  # served, not replayed
    assert await pools(ledger, "acct_A") == (0, 995)
    # each key's own record replays its own answer
    for ident in (test, live):
        replay = await reserved(ledger, ident, "r3", clock(), claim=_claim(ledger, ident))
        assert isinstance(replay, Replay)


async def test_a_live_keys_stream_is_not_replayed_to_a_test_key(
    ledger: Ledgers, clock: Clock
) -> None:
    await account(ledger, "acct_A", purchased=1_000)
    live = await key(ledger, "acct_A", "kl")
    test = await key(ledger, "acct_A", "kt", environment="test")
    await _served(ledger, live, "r1", clock(), used=5)
    await _served(ledger, test, "r2", clock(), used=7)  # served (simulated), not replayed
    assert await pools(ledger, "acct_A") == (0, 995)


async def test_a_json_routes_record_is_its_environments(ledger: Ledgers) -> None:
    def claim(env: str) -> IdempotencyClaim:
        return idempotency.claim(
            ledger.layout, "acct_A", "k", "/v1/x", b"{}", environment=env, pepper=PEPPER
        )

    assert await ledger.idempotency.claim(claim("live"), "run-1") is None
    await ledger.idempotency.close(claim("live"), "run-1", RecordedAnswer(201, b"live's"))
    for n, env in enumerate(("test", idempotency.OPERATOR)):
        assert await ledger.idempotency.claim(claim(env), f"run-{n + 2}") is None  # runs
    assert await ledger.idempotency.claim(claim("live"), "run-9") == RecordedAnswer(201, b"live's")


async def test_an_answer_of_any_size_is_kept(ledger: Ledgers) -> None:
    claim = idempotency.claim(
        ledger.layout, "acct_A", "k", "/v1/x", b"{}", environment="live", pepper=PEPPER
    )
    big = bytes(range(256)) * 4_096  # 1 MiB, every byte value
    assert await ledger.idempotency.claim(claim, "run-1") is None
    await ledger.idempotency.close(claim, "run-1", RecordedAnswer(201, big))
    assert await ledger.idempotency.claim(claim, "run-2") == RecordedAnswer(201, big)


async def test_a_claim_lapses_soon_and_a_recorded_answer_lives_a_day(ledger: Ledgers) -> None:
    claim = idempotency.claim(
        ledger.layout, "acct_A", "k", "/v1/x", b"{}", environment="live", pepper=PEPPER
    )
    assert await ledger.idempotency.claim(claim, "run-1") is None
    assert 0 < await ledger.redis.ttl(claim.record) <= idempotency.RUNNING_TTL_S
    await ledger.idempotency.close(claim, "run-1", RecordedAnswer(201, b"{}"))
    assert idempotency.TTL_S - 5 <= await ledger.redis.ttl(claim.record) <= idempotency.TTL_S


async def test_an_answer_over_the_bound_is_not_kept_and_its_key_is_freed(ledger: Ledgers) -> None:
    claim = idempotency.claim(
        ledger.layout, "acct_A", "k", "/v1/x", b"{}", environment="live", pepper=PEPPER
    )
    limit = Settings().max_body_bytes
    records = ledger.idempotency
    assert await records.claim(claim, "run-1") is None
    too_big = b"x" * (idempotency.answer_limit(limit) - 27)  # sealed: 28 bytes more
    assert not await records.keep(claim, "run-1", 201, too_big)
    assert await ledger.redis.exists(claim.record) == 0  # free: the retry runs
    assert await records.claim(claim, "run-2") is None
    assert await records.keep(claim, "run-2", 201, too_big[:-1])  # at the bound: kept
    sealed = await records.claim(claim, "run-3")
    assert isinstance(sealed, RecordedAnswer)
    assert (sealed.status, claim.seal.unseal(sealed.body)) == (201, too_big[:-1])


def test_the_answer_bound_covers_every_answer_a_request_can_ask_for() -> None:
    limit = 1_048_576
    assert idempotency.answer_limit(limit) >= 2 * limit
    assert idempotency.answer_limit(4_096) > 4_096 + 28  # the old bound, sealed


# -- the JSON routes, in process: any size, and a record that fails ---------------------


def _headers(svc: Svc, idem: str) -> dict[str, str]:  # noqa: F811 (svc is the fixture's type)
    return {"authorization": f"Bearer {svc.account.live_key}", "idempotency-key": idem}


KEY_BODY = {"name": "ci", "environment": "live", "daily_cap_credits": None}


async def _keys(client: httpx.AsyncClient, svc: Svc) -> list[str]:  # noqa: F811
    listed = await client.get(
        "/v1/api-keys", headers={"authorization": f"Bearer {svc.account.live_key}"}
    )
    return [k["id"] for k in listed.json()["data"]]


async def test_a_webhook_answer_over_4096_bytes_is_kept_and_replayed(svc: Svc) -> None:  # noqa: F811
    body = {"url": "https://8.8.8.8/" + "é" * 2000, "events": ["key.revoked"]}
    async with svc.client() as client:
        first = await client.post("/v1/webhooks", json=body, headers=_headers(svc, "wh"))
        assert first.status_code == 201, first.text
        assert len(first.content) > 4_096
        again = await client.post("/v1/webhooks", json=body, headers=_headers(svc, "wh"))
    assert (again.status_code, again.content) == (201, first.content)
    assert again.headers["idempotent-replayed"] == "true"


def _failing_close(records: IdempotencyRecords, *, free_too: bool) -> list[str]:
    """Make recording an answer fail as Redis does (and freeing the key too, with
    ``free_too``); the calls seen, by outcome."""
    calls: list[str] = []
    real = records.close

    async def close(claim: IdempotencyClaim, token: str, answer: RecordedAnswer | None) -> Any:
        calls.append("done" if answer is not None else "failed")
        if answer is not None or free_too:
            raise RedisConnectionError("Connection reset by peer")
        return await real(claim, token, answer)

    records.close = close  # type: ignore[method-assign]
    return calls


async def test_an_answer_not_recorded_is_sent_and_its_key_freed(svc: Svc) -> None:  # noqa: F811
    services = svc.services
    calls = _failing_close(services.idempotency_records, free_too=False)
    async with svc.client() as client:
        first = await client.post("/v1/api-keys", json=KEY_BODY, headers=_headers(svc, "mk"))
        # the key was made: its secret reaches the client
        assert first.status_code == 201, first.text
        assert first.json()["key"].startswith("svc_live_")
        assert calls == ["done", "failed"]
        claim = idempotency.claim(
            services.layout,
            svc.account.pid,
            "mk",
            "/v1/api-keys",
            first.request.content,
            environment="live",
            pepper=PEPPER,
        )
        assert await services.redis.exists(claim.record) == 0  # the key is free
        # so the request sent again runs (as one without a key would), not a 409 for a day
        again = await client.post("/v1/api-keys", json=KEY_BODY, headers=_headers(svc, "mk"))
        assert again.status_code == 201, again.text
        assert again.json()["id"] != first.json()["id"]
        assert first.json()["id"] in await _keys(client, svc)


async def test_when_redis_cannot_free_the_key_either_its_claim_lapses(svc: Svc) -> None:  # noqa: F811
    services = svc.services
    calls = _failing_close(services.idempotency_records, free_too=True)
    async with svc.client() as client:
        first = await client.post("/v1/api-keys", json=KEY_BODY, headers=_headers(svc, "mk"))
    assert first.status_code == 201, first.text
    assert calls == ["done", "failed"]
    claim = idempotency.claim(
        services.layout, svc.account.pid, "mk", "/v1/api-keys", first.request.content,
        environment="live",
        pepper=PEPPER,
    )  # fmt: skip
    assert 0 < await services.redis.ttl(claim.record) <= idempotency.RUNNING_TTL_S


async def test_a_failed_request_keeps_its_own_error_when_redis_cannot_free_the_key(
    svc: Svc,  # noqa: F811
) -> None:
    _failing_close(svc.services.idempotency_records, free_too=True)
    bad = {**KEY_BODY, "expires_at": "2020-01-01T00:00:00Z"}
    async with svc.client() as client:
        refused = await client.post("/v1/api-keys", json=bad, headers=_headers(svc, "mk"))
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "expires_at"


async def test_an_operators_grant_whose_record_was_lost_is_not_applied_twice(
    svc: Svc,  # noqa: F811
) -> None:
    """A grant's Idempotency-Key names the grant itself: when its record could not be
    written (its key freed), or was written under another name by an older svc, the retry
    runs again and adds nothing."""
    services = svc.services
    calls = _failing_close(services.idempotency_records, free_too=False)
    admin = {"authorization": "Bearer test-admin-token", "idempotency-key": "grant-7"}
    path = f"/admin/v1/accounts/{svc.account.pid}/grants"
    before = await pools(services.money, svc.account.pid)
    async with svc.client() as client:
        first = await client.post(path, json={"credits": 500}, headers=admin)
        assert first.status_code == 200, first.text
        assert calls == ["done", "failed"]  # not recorded: the key is free
        again = await client.post(path, json={"credits": 500}, headers=admin)
        assert again.status_code == 200, again.text
    assert again.json()["total_available"] == first.json()["total_available"]
    assert await pools(services.money, svc.account.pid) == (before[0], before[1] + 500)
