"""AppLovin MAX's S2S rewarded callbacks: ``event_key`` = sha1(event id + Event Key), checked
against AppLovin's own worked example, and ``GET /v1/spotlights/applovin`` in process: a
callback signed by the scheme rewards its intent once; anything the hash does not prove
writes nothing."""

from __future__ import annotations

import asyncio
import hashlib

import httpx
import msgspec
import pytest

from app.core.metrics import METRICS
from app.spotlights.applovin import event_key, parse_callback, signed
from tests.support.mediation import applovin_query as signed_query
from tests.support.scripts_helpers import snapshot
from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401 (fixtures)
from tests.unit.spotlights.test_rewards import _earned, _intent

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)

# AppLovin's worked example ("How server-to-server callback works"): this Event Key and
# event id make this {EVENT_KEY}
DOC_EVENT_KEY = (
    "uHXOnmfO2f3wd-syBwXxsj7m53qiJoI9VzXTvE8LOSnIWjS6zzxS8HgSIBJSbQWdS1czmgwXSWDaKwehtjyYl_"
)
DOC_EVENT_ID = "14a97273742c0c9e8864fe40193dad5506e930bc"
DOC_HASH = "3724081c17d32a66276ffff2a14b124a278934e9"
KEY = "max-event-key-of-the-test"


def applovin_query(intent: str, event: str, key: str = KEY, **changed: str) -> bytes:
    """A MAX callback hashed with the test's Event Key unless told (``tests.support``)."""
    return signed_query(intent, event, key, **changed)


def test_the_event_key_is_applovins_documented_example() -> None:
    assert event_key(DOC_EVENT_ID, DOC_EVENT_KEY.encode()) == DOC_HASH
    query = f"event_id={DOC_EVENT_ID}&event_key={DOC_HASH}&custom_data=spi_x".encode()
    callback = parse_callback(query)
    assert signed(callback, (DOC_EVENT_KEY.encode(),))
    assert signed(callback, (b"another-key", DOC_EVENT_KEY.encode()))  # rotation
    assert not signed(callback, (b"another-key",))
    upper = parse_callback(query.replace(DOC_HASH.encode(), DOC_HASH.upper().encode()))
    assert signed(upper, (DOC_EVENT_KEY.encode(),))  # hex in either case


def test_event_token_is_the_same_scheme_and_every_hash_sent_must_match() -> None:
    good = hashlib.sha1((DOC_EVENT_ID + KEY).encode()).hexdigest()
    keys = (KEY.encode(),)
    both = parse_callback(f"event_id={DOC_EVENT_ID}&event_key={good}&event_token={good}".encode())
    assert signed(both, keys)
    mixed = f"event_id={DOC_EVENT_ID}&event_key={good}&event_token={DOC_HASH}".encode()
    assert not signed(parse_callback(mixed), keys)


async def _get(client: httpx.AsyncClient, query: bytes) -> httpx.Response:
    return await client.get("/v1/spotlights/applovin?" + query.decode())


def _configure(svc: Svc, keys: str = KEY, ad_units: str = "") -> None:  # noqa: F811
    services = svc.services
    services.settings = msgspec.structs.replace(
        services.settings, applovin_event_keys=keys, applovin_ad_units=ad_units
    )


def _count(result: str) -> float:
    value = METRICS.registry.get_sample_value(
        "svc_spotlight_callbacks_total", {"network": "applovin", "result": result}
    )
    return value or 0.0


async def test_a_signed_callback_rewards_its_intent_once(svc: Svc) -> None:  # noqa: F811
    _configure(svc)
    key = svc.account.live_key
    rewarded_before = _count("rewarded")
    async with svc.client() as client:
        query = applovin_query(await _intent(client, key), "evt-1")
        first = await _get(client, query)
        assert first.status_code == 200, first.text
        assert first.json()["rewarded"] is True
        assert first.json()["credits"] == 5_000
        again = await _get(client, query)  # a retry after a timeout
        assert (again.status_code, again.json()["reason"]) == (200, "duplicate")
        assert await _earned(client, key) == 5_000
        listed = await client.get(
            "/v1/spotlights/rewards", headers={"authorization": f"Bearer {key}"}
        )
    [reward] = listed.json()["data"]
    assert (reward["network"], reward["view_id"]) == ("applovin", "evt-1")
    grant = await svc.services.store.get_grant(f"applovin:{svc.account.pid}:evt-1")
    assert grant is not None
    assert (grant.source, grant.reference, grant.kind) == ("applovin", "evt-1", "reward")
    assert _count("rewarded") == rewarded_before + 1


async def test_what_the_hash_does_not_prove_writes_nothing(svc: Svc) -> None:  # noqa: F811
    _configure(svc)
    key = svc.account.live_key
    refused_before = _count("invalid_signature")
    async with svc.client() as client:
        intent = await _intent(client, key)
        good = applovin_query(intent, "evt-2")
        before = await snapshot(svc.services)  # type: ignore[arg-type]
        entries = await svc.services.store.list_grants(svc.account.pid)
        refused = {
            "event id changed": applovin_query(intent, "evt-2", event_id="evt-3"),
            "hash changed": applovin_query(intent, "evt-2", event_key="0" * 40),
            "wrong key": applovin_query(intent, "evt-2", key="guessed-key"),
            "no hash": good.replace(b"event_key=", b"other=", 1),
            "empty hash": applovin_query(intent, "evt-2", event_key=""),
        }
        for name, query in refused.items():
            answer = await _get(client, query)
            assert answer.status_code == 401, (name, answer.text)
            assert answer.json()["error"]["code"] == "invalid_signature"
            assert KEY not in answer.text
        # the intent is svc's sealed token: changed, forged or absent, it is no intent
        for custom_data in (intent[:-6] + "AAAAAA", "spi_forged", ""):
            answer = await _get(client, applovin_query(custom_data, "evt-2"))
            assert (answer.status_code, answer.json()["error"]["code"]) == (400, "invalid_intent")
        twice = good + b"&event_id=evt-9"
        assert (await _get(client, twice)).json()["error"]["param"] == "event_id"
        too_long = applovin_query(intent, "e" * 201)
        assert (await _get(client, too_long)).json()["error"]["param"] == "event_id"
        assert await snapshot(svc.services) == before  # type: ignore[arg-type]
        assert await svc.services.store.list_grants(svc.account.pid) == entries
        assert await _earned(client, key) == 0
        # what MAX does not sign is not read: the reward is svc's own
        unsigned = applovin_query(intent, "evt-2", amount="999", currency="gold", user_id="x")
        answer = await _get(client, unsigned)
        assert (answer.json()["rewarded"], answer.json()["credits"]) == (True, 5_000)
    assert _count("invalid_signature") == refused_before + len(refused) + 2


async def test_event_token_rewards_like_event_key(svc: Svc) -> None:  # noqa: F811
    _configure(svc)
    key = svc.account.live_key
    async with svc.client() as client:
        query = applovin_query(await _intent(client, key), "evt-t", hash_name="event_token")
        assert (await _get(client, query)).json()["rewarded"] is True


async def test_rotated_keys_both_verify_and_a_retired_one_does_not(svc: Svc) -> None:  # noqa: F811
    _configure(svc, keys=f" old-key , {KEY} ,")
    key = svc.account.live_key
    async with svc.client() as client:
        for n, signing in enumerate(("old-key", KEY)):
            query = applovin_query(await _intent(client, key), f"evt-r{n}", key=signing)
            assert (await _get(client, query)).json()["rewarded"] is True
        _configure(svc, keys=KEY)  # the old key removed
        retired = applovin_query(await _intent(client, key), "evt-r2", key="old-key")
        assert (await _get(client, retired)).status_code == 401
        assert await _earned(client, key) == 10_000


async def test_reused_intents_and_the_days_limit(svc: Svc) -> None:  # noqa: F811
    _configure(svc)
    key = svc.account.live_key
    async with svc.client() as client:
        intent = await _intent(client, key)
        assert (await _get(client, applovin_query(intent, "evt-a"))).json()["rewarded"]
        reused = await _get(client, applovin_query(intent, "evt-b"))
        assert (reused.status_code, reused.json()["error"]["code"]) == (400, "intent_used")
        answers = []
        for n in range(5):  # 6 views in the day, the one above included
            query = applovin_query(await _intent(client, key), f"evt-d{n}")
            answers.append((await _get(client, query)).json())
        assert [a["rewarded"] for a in answers] == [True] * 4 + [False]
        assert answers[-1]["reason"] == "daily_limit"
        assert await _earned(client, key) == 25_000


async def test_fifty_deliveries_of_one_event_reward_it_once(svc: Svc) -> None:  # noqa: F811
    _configure(svc)
    key = svc.account.live_key
    async with svc.client() as client:
        query = applovin_query(await _intent(client, key), "evt-50")
        answers = await asyncio.gather(*(_get(client, query) for _ in range(50)))
        assert {a.status_code for a in answers} == {200}
        assert sum(a.json()["rewarded"] for a in answers) == 1
        assert await _earned(client, key) == 5_000


async def test_the_ad_unit_list_and_the_route_off(svc: Svc) -> None:  # noqa: F811
    key = svc.account.live_key
    async with svc.client() as client:
        intent = await _intent(client, key)
        _configure(svc, keys=" , ")
        off = await _get(client, applovin_query(intent, "evt-u"))
        assert (off.status_code, off.json()["error"]["code"]) == (404, "not_found")
        assert "SVC_APPLOVIN_EVENT_KEYS" in off.json()["error"]["message"]
        _configure(svc, ad_units="1111111111111111, 2222222222222222")
        outside = await _get(client, applovin_query(intent, "evt-u"))
        assert (outside.status_code, outside.json()["error"]["param"]) == (400, "ad_unit_id")
        inside = applovin_query(intent, "evt-u", ad_unit_id="2222222222222222")
        assert (await _get(client, inside)).json()["rewarded"] is True
