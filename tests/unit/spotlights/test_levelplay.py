"""Unity LevelPlay's S2S reward callbacks: ``signature`` = md5(timestamp + eventId +
appUserId + rewards + private key), and ``GET /v1/spotlights/levelplay`` in process: a
callback signed by the scheme rewards its ``custom_intent`` once and is answered
``<eventId>:OK`` (also when it is a duplicate or capped, so LevelPlay stops retrying);
anything the signature does not prove writes nothing."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import httpx
import msgspec
import pytest

from app.core.metrics import METRICS
from app.spotlights.levelplay import parse_callback, signature, signed
from tests.support.mediation import levelplay_query as signed_query
from tests.support.mediation import stamp
from tests.support.scripts_helpers import snapshot
from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401 (fixtures)
from tests.unit.spotlights.test_rewards import _earned, _intent

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)

KEY = "levelplay-private-key-of-the-test"


def levelplay_query(intent: str | None, event: str, key: str = KEY, **changed: Any) -> bytes:
    """A LevelPlay callback signed with the test's private key unless told
    (``tests.support``)."""
    return signed_query(intent, event, key, **changed)


def test_the_signature_is_levelplays_scheme() -> None:
    # md5 of "202601021455" "evt-1" "player 1" "5" "secret", worked out by hand
    query = (
        b"appUserId=player+1&eventId=evt-1&rewards=5&timestamp=202601021455"
        b"&signature=" + hashlib.md5(b"202601021455evt-1player 15secret").hexdigest().encode()
    )
    callback = parse_callback(query)
    assert callback.app_user_id == "player 1"  # percent-decoded, as it was signed
    assert signature(callback, b"secret") == callback.signature
    assert signed(callback, (b"other", b"secret"))
    assert not signed(callback, (b"other",))
    assert callback.shown_at_ms == 1_767_365_700_000  # 2026-01-02 14:55 UTC


def _configure(svc: Svc, keys: str = KEY) -> None:  # noqa: F811
    services = svc.services
    services.settings = msgspec.structs.replace(services.settings, levelplay_private_keys=keys)


async def _get(client: httpx.AsyncClient, query: bytes) -> httpx.Response:
    return await client.get("/v1/spotlights/levelplay?" + query.decode())


def _count(result: str) -> float:
    value = METRICS.registry.get_sample_value(
        "svc_spotlight_callbacks_total", {"network": "levelplay", "result": result}
    )
    return value or 0.0


async def test_a_signed_callback_rewards_once_and_is_acknowledged(svc: Svc) -> None:  # noqa: F811
    _configure(svc)
    key = svc.account.live_key
    async with svc.client() as client:
        query = levelplay_query(await _intent(client, key), "evt-1")
        first = await _get(client, query)
        assert (first.status_code, first.text) == (200, "evt-1:OK")
        assert first.headers["content-type"].startswith("text/plain")
        again = await _get(client, query)  # LevelPlay's retry: still acknowledged
        assert (again.status_code, again.text) == (200, "evt-1:OK")
        assert await _earned(client, key) == 5_000
    grant = await svc.services.store.get_grant(f"levelplay:{svc.account.pid}:evt-1")
    assert grant is not None
    assert (grant.source, grant.reference, grant.credits) == ("levelplay", "evt-1", 5_000)


async def test_what_the_signature_does_not_prove_writes_nothing(svc: Svc) -> None:  # noqa: F811
    _configure(svc)
    key = svc.account.live_key
    refused_before = _count("invalid_signature")
    async with svc.client() as client:
        intent = await _intent(client, key)
        good = levelplay_query(intent, "evt-2")
        before = await snapshot(svc.services)  # type: ignore[arg-type]
        entries = await svc.services.store.list_grants(svc.account.pid)
        an_hour_ago = stamp(time.time() - 3_600)
        refused = {
            "eventId": levelplay_query(intent, "evt-2", eventId="evt-3"),
            "appUserId": levelplay_query(intent, "evt-2", appUserId="someone-else"),
            "rewards": levelplay_query(intent, "evt-2", rewards="100"),
            "timestamp": levelplay_query(intent, "evt-2", timestamp=an_hour_ago),
            "signature": levelplay_query(intent, "evt-2", signature="0" * 32),
            "wrong key": levelplay_query(intent, "evt-2", key="guessed-key"),
            "no signature": good.replace(b"signature=", b"other=", 1),
        }
        for name, query in refused.items():
            answer = await _get(client, query)
            assert answer.status_code == 401, (name, answer.text)
            assert answer.json()["error"]["code"] == "invalid_signature"
            assert KEY not in answer.text
        malformed = {
            "timestamp": levelplay_query(intent, "evt-2", timestamp="2026-01-02"),
            "rewards": levelplay_query(intent, "evt-2", rewards="-5"),
            "eventId": good + b"&eventId=evt-9",
        }
        for param, query in malformed.items():
            answer = await _get(client, query)
            assert (answer.status_code, answer.json()["error"]["param"]) == (400, param)
        # the intent is not signed by LevelPlay, but it is svc's sealed token
        for forged in (intent[:-6] + "AAAAAA", "spi_forged"):
            answer = await _get(client, levelplay_query(forged, "evt-2"))
            assert (answer.status_code, answer.json()["error"]["code"]) == (400, "invalid_intent")
        assert await snapshot(svc.services) == before  # type: ignore[arg-type]
        assert await svc.services.store.list_grants(svc.account.pid) == entries
        assert (await _get(client, good)).text == "evt-2:OK"
        assert await _earned(client, key) == 5_000
    assert _count("invalid_signature") == refused_before + len(refused) + len(malformed)


async def test_a_view_outside_the_intents_life_is_refused(svc: Svc) -> None:  # noqa: F811
    _configure(svc)
    key = svc.account.live_key
    async with svc.client() as client:
        intent = await _intent(client, key)
        for at in (time.time() - 7_200, time.time() + 7_200):  # before it, past svc's clock
            answer = await _get(client, levelplay_query(intent, "evt-t", at=at))
            assert (answer.status_code, answer.json()["error"]["code"]) == (400, "invalid_intent")
        assert (await _get(client, levelplay_query(intent, "evt-t"))).text == "evt-t:OK"
        assert await _earned(client, key) == 5_000


async def test_a_signed_callback_without_an_intent_is_acknowledged_and_rewards_nothing(
    svc: Svc,  # noqa: F811
) -> None:
    """LevelPlay's test of the callback URL carries no intent: svc acknowledges it (or the
    callback is not activated) and writes nothing."""
    _configure(svc)
    before = await snapshot(svc.services)  # type: ignore[arg-type]
    counted = _count("invalid_intent")
    async with svc.client() as client:
        for query in (levelplay_query(None, "test-1"), levelplay_query("", "test-2")):
            answer = await _get(client, query)
            assert answer.status_code == 200, answer.text
            assert answer.text.endswith(":OK")
        unsigned = levelplay_query(None, "test-3", key="guessed-key")
        assert (await _get(client, unsigned)).status_code == 401
    assert await snapshot(svc.services) == before  # type: ignore[arg-type]
    assert _count("invalid_intent") == counted + 2


async def test_rotated_keys_reused_intents_and_the_days_limit(svc: Svc) -> None:  # noqa: F811
    _configure(svc, keys=f"old-key,{KEY}")
    key = svc.account.live_key
    async with svc.client() as client:
        intent = await _intent(client, key)
        old = await _get(client, levelplay_query(intent, "evt-a", key="old-key"))
        assert old.text == "evt-a:OK"
        reused = await _get(client, levelplay_query(intent, "evt-b"))
        assert (reused.status_code, reused.json()["error"]["code"]) == (400, "intent_used")
        replies = []
        for n in range(5):  # 6 views in the day, the one above included
            query = levelplay_query(await _intent(client, key), f"evt-d{n}")
            replies.append((await _get(client, query)).text)
        # the sixth is capped: acknowledged all the same, so LevelPlay stops retrying it
        assert replies == [f"evt-d{n}:OK" for n in range(5)]
        assert await _earned(client, key) == 25_000
        listed = await client.get(
            "/v1/spotlights/rewards", headers={"authorization": f"Bearer {key}"}
        )
        assert listed.json()["rewards_today"] == 5
        assert {r["network"] for r in listed.json()["data"]} == {"levelplay"}
        _configure(svc, keys=KEY)  # the old key removed
        retired = levelplay_query(await _intent(client, key), "evt-r", key="old-key")
        assert (await _get(client, retired)).status_code == 401
    assert await svc.services.store.get_grant(f"levelplay:{svc.account.pid}:evt-d4") is None


async def test_fifty_deliveries_of_one_event_reward_it_once(svc: Svc) -> None:  # noqa: F811
    _configure(svc)
    key = svc.account.live_key
    async with svc.client() as client:
        query = levelplay_query(await _intent(client, key), "evt-50")
        answers = await asyncio.gather(*(_get(client, query) for _ in range(50)))
        assert {(a.status_code, a.text) for a in answers} == {(200, "evt-50:OK")}
        assert await _earned(client, key) == 5_000


async def test_the_route_is_off_without_a_private_key(svc: Svc) -> None:  # noqa: F811
    key = svc.account.live_key
    async with svc.client() as client:
        off = await _get(client, levelplay_query(await _intent(client, key), "evt-off"))
        assert (off.status_code, off.json()["error"]["code"]) == (404, "not_found")
        assert "SVC_LEVELPLAY_PRIVATE_KEYS" in off.json()["error"]["message"]
        assert await _earned(client, key) == 0
