"""Issue 44 item 7: a disabled account earns nothing for an intent issued before the disable,
on every reward path (AdMob's callback, the signed one). The grant script reads the status
in the call that grants, so a disable racing a callback is seen too."""

from __future__ import annotations

import asyncio

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from app.core.clock import day_tag, utc_day
from app.credits.outcomes import ScriptStatus
from app.kv.client import RedisClient
from app.kv.fields import ACCOUNT_ACTIVE, ACCOUNT_DISABLED
from app.kv.layout import KeySpace
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, pools, snapshot
from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401 (fixtures)
from tests.unit.spotlights.test_admob_route import _callback, _query, admob  # noqa: F401
from tests.unit.spotlights.test_rewards import SECRET, TTL, _earned, _intent, _verified

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
NOW = 1_790_000_000.0
ADMIN = {"authorization": "Bearer test-admin-token"}
DISABLED = {"object": "spotlight.callback", "rewarded": False, "reason": "account_disabled"}


async def _grant(
    ledger: Ledgers, view: str, intent: str | None = "intent", daily_limit: int = 5
) -> ScriptStatus:
    granted = await ledger.money.grant(
        "acct_A",
        pool="earned",
        credits=5_000,
        grant_id=f"signed:acct_A:{view}",
        now=NOW,
        earned_ttl_s=TTL,
        daily_limit=daily_limit,
        intent=None if intent is None else (intent, 3_600),
    )
    return granted.status


async def test_the_grant_script_refuses_an_intent_of_a_disabled_account(ledger: Ledgers) -> None:
    await account(ledger, "acct_A")
    assert await _grant(ledger, "v0", "intent-0") is ScriptStatus.OK
    await ledger.money.set_account_status("acct_A", ACCOUNT_DISABLED)
    before = await snapshot(ledger)
    assert await _grant(ledger, "v1", "intent-1") is ScriptStatus.ACCOUNT_DISABLED
    # nothing written: no credits, no day's count, no grant marker, the intent not consumed
    assert await snapshot(ledger) == before
    # the network's retry of a view rewarded before the disable: still told it was rewarded
    assert await _grant(ledger, "v0", "intent-0") is ScriptStatus.DUPLICATE
    # a grant without an intent (an operator's, a purchase) is the operator's own: it applies
    assert await _grant(ledger, "desk-1", intent=None) is ScriptStatus.OK
    await ledger.money.set_account_status("acct_A", ACCOUNT_ACTIVE)
    assert await _grant(ledger, "v1", "intent-1") is ScriptStatus.OK  # the intent was kept
    assert await pools(ledger, "acct_A") == (15_000, 0)


async def test_a_disable_racing_callbacks_is_seen_by_each(
    real_redis: RedisClient, keyspace: KeySpace
) -> None:
    """200 callbacks at once with a disable among them, on a real server: each grant is
    applied whole before the disable or refused whole after it, never in between."""
    ledger = Ledgers(real_redis, keyspace, cap_ttl_s=172_800, usage_ttl_s=86_400)
    await account(ledger, "acct_A")
    views = range(200)
    connections = asyncio.Semaphore(30)  # within the test pool; Redis sees them interleaved

    async def one(n: int) -> ScriptStatus:
        async with connections:
            return await _grant(ledger, f"v{n}", f"intent-{n}", daily_limit=1_000)

    async def disable() -> ScriptStatus:
        async with connections:
            return (await ledger.money.set_account_status("acct_A", ACCOUNT_DISABLED)).status

    answers = await asyncio.gather(*map(one, views[:100]), disable(), *map(one, views[100:]))
    assert answers[100] is ScriptStatus.OK  # the disable
    statuses = [*answers[:100], *answers[101:]]
    granted = {n for n, status in zip(views, statuses, strict=True) if status is ScriptStatus.OK}
    refused = {
        n for n, s in zip(views, statuses, strict=True) if s is ScriptStatus.ACCOUNT_DISABLED
    }
    assert len(granted) + len(refused) == 200
    assert granted  # the disable landed among them
    assert refused
    assert await pools(ledger, "acct_A") == (5_000 * len(granted), 0)
    shard = keyspace.shard("acct_A")
    counted = await real_redis.get(keyspace.spotlight(shard, "acct_A", day_tag(utc_day(NOW))))
    for n in views:
        consumed = await real_redis.exists(keyspace.spotlight_intent(shard, f"intent-{n}"))
        marked = await real_redis.exists(keyspace.grant_marker(shard, f"signed:acct_A:v{n}"))
        assert (consumed, marked) == ((1, 1) if n in granted else (0, 0)), n
    assert counted is not None
    assert int(counted) == len(granted)
    # after the disable has answered, every callback is refused
    assert await _grant(ledger, "late", "intent-late") is ScriptStatus.ACCOUNT_DISABLED


async def _set_status(svc: Svc, status: str) -> None:  # noqa: F811
    async with svc.client() as client:
        answer = await client.patch(
            f"/admin/v1/accounts/{svc.account.pid}", json={"status": status}, headers=ADMIN
        )
        assert answer.status_code == 200, answer.text


async def test_a_signed_callback_for_a_disabled_account_rewards_nothing(
    svc: Svc,  # noqa: F811
) -> None:
    svc.services.spotlight_secrets = (SECRET,)
    key = svc.account.live_key
    async with svc.client() as client:
        token = await _intent(client, key)  # issued while the account is active
        await _set_status(svc, ACCOUNT_DISABLED)
        answer = await _verified(client, token, "view-1")
        assert (answer.status_code, answer.json()) == (200, DISABLED)
        assert (await pools(svc.services.money, svc.account.pid))[0] == 0  # earned
        grant = f"signed:{svc.account.pid}:view-1"
        assert await svc.services.store.get_grant(grant) is None
        await _set_status(svc, ACCOUNT_ACTIVE)
        assert await _earned(client, key) == 0
        # the intent was not consumed: enabled again, the verifier's retry rewards
        assert (await _verified(client, token, "view-1")).json()["rewarded"] is True


async def test_an_admob_callback_for_a_disabled_account_rewards_nothing(
    svc: Svc,  # noqa: F811
    admob: ec.EllipticCurvePrivateKey,  # noqa: F811
) -> None:
    key = svc.account.live_key
    async with svc.client() as client:
        query = _query(admob, await _intent(client, key), transaction_id="tx-off")
        await _set_status(svc, ACCOUNT_DISABLED)
        answer = await _callback(client, query)
        assert (answer.status_code, answer.json()) == (200, DISABLED)
        assert (await pools(svc.services.money, svc.account.pid))[0] == 0  # earned
        assert await svc.services.store.get_grant(f"admob:{svc.account.pid}:tx-off") is None
        await _set_status(svc, ACCOUNT_ACTIVE)
        assert (await _callback(client, query)).json()["rewarded"] is True  # AdMob's retry
