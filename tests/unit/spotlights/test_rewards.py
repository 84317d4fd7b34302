"""Verified spotlight rewards: the grant script consumes the view's intent in the same call
(fakeredis, the real Valkey and the Cluster), and the routes reward only what a valid
signature and intent prove, once, under concurrency."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from app.credits.outcomes import ScriptStatus
from app.spotlights.signed import SIGNATURE_HEADER, sign
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, pools, snapshot
from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401 (fixtures)

# create_app registers routes whose parameters use spellings Litestar 2.23+ deprecates
pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
SECRET = b"verifier-secret"
TTL = 30 * 86_400


async def _grant(ledger: Ledgers, grant_id: str, intent: str, now: float) -> ScriptStatus:
    granted = await ledger.money.grant(
        "acct_A",
        pool="earned",
        credits=5_000,
        grant_id=grant_id,
        now=now,
        earned_ttl_s=TTL,
        daily_limit=5,
        intent=(intent, 3_600),
    )
    return granted.status


async def test_a_grant_consumes_its_intent_once(ledger: Ledgers) -> None:
    await account(ledger, "acct_A")
    now = 1_790_000_000.0
    assert await _grant(ledger, "signed:v1", "intent-1", now) is ScriptStatus.OK
    assert await pools(ledger, "acct_A") == (5_000, 0)
    # the network's retry of the same view: a duplicate, not a refusal of the used intent
    assert await _grant(ledger, "signed:v1", "intent-1", now) is ScriptStatus.DUPLICATE
    # another view with the used intent: nothing changes at all
    before = await snapshot(ledger)
    assert await _grant(ledger, "signed:v2", "intent-1", now) is ScriptStatus.INTENT_USED
    assert await snapshot(ledger) == before
    marker = ledger.layout.spotlight_intent(ledger.layout.shard("acct_A"), "intent-1")
    assert 0 < await ledger.redis.ttl(marker) <= 3_600


async def test_a_capped_view_keeps_its_intent(ledger: Ledgers) -> None:
    await account(ledger, "acct_A")
    now = 1_790_000_000.0
    for n in range(5):
        assert await _grant(ledger, f"signed:v{n}", f"intent-{n}", now) is ScriptStatus.OK
    before = await snapshot(ledger)
    assert await _grant(ledger, "signed:v5", "intent-5", now) is ScriptStatus.DAILY_LIMIT
    assert await snapshot(ledger) == before  # the sixth writes nothing, its intent included
    assert await pools(ledger, "acct_A") == (25_000, 0)


# -- the routes, in process


async def _intent(client: httpx.AsyncClient, key: str) -> str:
    answer = await client.post("/v1/spotlights/intents", headers={"authorization": f"Bearer {key}"})
    assert answer.status_code == 201, answer.text
    token: str = answer.json()["token"]
    return token


async def _verified(
    client: httpx.AsyncClient, intent: str, view_id: str, secret: bytes = SECRET
) -> httpx.Response:
    body = json.dumps({"intent": intent, "view_id": view_id}).encode()
    headers = {SIGNATURE_HEADER: sign(secret, int(time.time()), body)}
    return await client.post("/v1/spotlights/verified", content=body, headers=headers)


async def _earned(client: httpx.AsyncClient, key: str) -> int:
    credits = await client.get("/v1/credits", headers={"authorization": f"Bearer {key}"})
    earned: int = credits.json()["earned_available"]
    return earned


async def test_an_intent_needs_a_live_key(svc: Svc) -> None:  # noqa: F811
    async with svc.client() as client:
        answer = await client.post("/v1/spotlights/intents")
        assert answer.status_code == 401
        auth = {"authorization": f"Bearer {svc.account.test_key}"}
        answer = await client.post("/v1/spotlights/intents", headers=auth)
        assert (answer.status_code, answer.json()["error"]["code"]) == (403, "test_key_forbidden")
        token = await _intent(client, svc.account.live_key)
    assert svc.account.pid not in token


async def test_signed_callbacks_are_off_without_secrets(svc: Svc) -> None:  # noqa: F811
    async with svc.client() as client:
        token = await _intent(client, svc.account.live_key)
        answer = await _verified(client, token, "view-1")
        assert answer.status_code == 404
        assert await _earned(client, svc.account.live_key) == 0


async def test_a_signed_view_is_rewarded_once(svc: Svc) -> None:  # noqa: F811
    svc.services.spotlight_secrets = (b"old-secret", SECRET)
    key = svc.account.live_key
    async with svc.client() as client:
        token = await _intent(client, key)
        first = await _verified(client, token, "view-1")
        assert first.status_code == 200, first.text
        assert first.json()["rewarded"] is True
        assert first.json()["credits"] == 5_000
        assert await _earned(client, key) == 5_000
        again = await _verified(client, token, "view-1")  # the verifier's retry
        assert again.json() == {
            "object": "spotlight.callback",
            "rewarded": False,
            "reason": "duplicate",
        }
        reused = await _verified(client, token, "view-2")  # another view, the used intent
        assert (reused.status_code, reused.json()["error"]["code"]) == (400, "intent_used")
        assert await _earned(client, key) == 5_000


async def test_nothing_is_written_without_a_valid_signature_and_intent(
    svc: Svc,  # noqa: F811
) -> None:
    svc.services.spotlight_secrets = (SECRET,)
    key = svc.account.live_key
    async with svc.client() as client:
        token = await _intent(client, key)
        forged = await _verified(client, token, "view-1", secret=b"guessed")
        assert (forged.status_code, forged.json()["error"]["code"]) == (401, "invalid_signature")
        body = json.dumps({"intent": token, "view_id": "view-1"}).encode()
        unsigned = await client.post("/v1/spotlights/verified", content=body)
        assert unsigned.status_code == 401
        other = await _verified(client, token[:-6] + "AAAAAA", "view-1")
        assert (other.status_code, other.json()["error"]["code"]) == (400, "invalid_intent")
        bad_body = await _verified(client, token, "")  # view ids are 1 to 200 characters
        assert bad_body.status_code == 400
        assert await _earned(client, key) == 0
        # the intent was never used: a valid callback still rewards it
        assert (await _verified(client, token, "view-1")).json()["rewarded"] is True


async def test_six_views_in_a_day_are_five_rewards(svc: Svc) -> None:  # noqa: F811
    svc.services.spotlight_secrets = (SECRET,)
    key = svc.account.live_key
    async with svc.client() as client:
        answers = []
        for n in range(6):
            token = await _intent(client, key)
            answers.append((await _verified(client, token, f"view-{n}")).json())
        assert [a["rewarded"] for a in answers] == [True] * 5 + [False]
        assert answers[-1]["reason"] == "daily_limit"
        assert await _earned(client, key) == 25_000


async def test_a_hundred_deliveries_of_one_view_reward_it_once(svc: Svc) -> None:  # noqa: F811
    svc.services.spotlight_secrets = (SECRET,)
    key = svc.account.live_key
    async with svc.client() as client:
        token = await _intent(client, key)
        answers = await asyncio.gather(*(_verified(client, token, "view-1") for _ in range(100)))
        assert {a.status_code for a in answers} == {200}
        assert sum(a.json()["rewarded"] for a in answers) == 1
        assert await _earned(client, key) == 5_000
        grants = await svc.services.store.get_grant(f"signed:{svc.account.pid}:view-1")
        assert grants is not None
        assert grants.credits == 5_000


async def test_a_reward_is_told_once_to_the_accounts_webhooks(svc: Svc) -> None:  # noqa: F811
    svc.services.spotlight_secrets = (SECRET,)
    auth = {"authorization": f"Bearer {svc.account.live_key}"}
    async with svc.client() as client:
        hook = await client.post(
            "/v1/webhooks",
            json={"url": "https://8.8.8.8/hook", "events": ["credits.earned"]},
            headers=auth,
        )
        assert hook.status_code == 201, hook.text
        token = await _intent(client, svc.account.live_key)
        for _ in range(3):  # the verifier's retries add no event
            await _verified(client, token, "view-1")
        listed = await client.get(f"/v1/webhooks/{hook.json()['id']}/deliveries", headers=auth)
    [delivery] = listed.json()["data"]
    assert delivery["type"] == "credits.earned"


async def test_the_account_lists_its_rewards_newest_first(svc: Svc) -> None:  # noqa: F811
    svc.services.spotlight_secrets = (SECRET,)
    key = svc.account.live_key
    auth = {"authorization": f"Bearer {key}"}
    pid = svc.account.pid
    async with svc.client() as client:
        empty = (await client.get("/v1/spotlights/rewards", headers=auth)).json()
        assert (empty["data"], empty["rewards_today"], empty["daily_limit"]) == ([], 0, 5)
        for n in range(2):
            await _verified(client, await _intent(client, key), f"view-{n}")
        granted = await client.post(
            f"/admin/v1/accounts/{pid}/spotlights",
            json={"view_id": "desk-1"},
            headers={"authorization": "Bearer test-admin-token"},
        )
        assert granted.status_code == 200, granted.text
        # a test key of the account sees the same list; 3 views rewarded today
        test_auth = {"authorization": f"Bearer {svc.account.test_key}"}
        listed = await client.get("/v1/spotlights/rewards", headers=test_auth)
        assert listed.status_code == 200, listed.text
        body = listed.json()
        assert body["rewards_today"] == 3
        assert body["credits_per_reward"] == 5_000
        networks = {(r["network"], r["view_id"]) for r in body["data"]}
        assert networks == {("signed", "view-0"), ("signed", "view-1"), ("operator", "desk-1")}
        times = [r["granted_at"] for r in body["data"]]
        assert times == sorted(times, reverse=True)
        assert all(r["credits"] == 5_000 and r["earned_expires_at"] for r in body["data"])
        one = await client.get("/v1/spotlights/rewards?limit=1", headers=auth)
        assert len(one.json()["data"]) == 1
        assert one.json()["rewards_today"] == 3
        for bad in ("0", "101", "x"):
            refused = await client.get(f"/v1/spotlights/rewards?limit={bad}", headers=auth)
            assert (refused.status_code, refused.json()["error"]["param"]) == (400, "limit")
        assert (await client.get("/v1/spotlights/rewards")).status_code == 401


async def test_one_view_id_in_two_accounts_is_two_rewards(svc: Svc) -> None:  # noqa: F811
    """A verifier's view ids need be unique only per account: the ledger keeps both, so
    Redis and the durable store agree."""
    svc.services.spotlight_secrets = (SECRET,)
    admin = {"authorization": "Bearer test-admin-token"}
    async with svc.client() as client:
        created = await client.post("/admin/v1/accounts", headers=admin)
        other = created.json()["account_pid"]
        made = await client.post(
            f"/admin/v1/accounts/{other}/api-keys",
            json={"name": "app", "environment": "live", "daily_cap_credits": None},
            headers=admin,
        )
        assert made.status_code == 201, made.text
        keys = {svc.account.pid: svc.account.live_key, other: made.json()["key"]}
        for key in keys.values():
            answer = await _verified(client, await _intent(client, key), "view-1")
            assert answer.json()["rewarded"] is True, answer.text
            assert await _earned(client, key) == 5_000
    for pid in keys:
        grant = await svc.services.store.get_grant(f"signed:{pid}:view-1")
        assert grant is not None
        assert (grant.account_pid, grant.reference) == (pid, "view-1")
