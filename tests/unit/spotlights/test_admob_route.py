"""``GET /v1/spotlights/admob`` in process: AdMob's signed callback rewards the intent in its
``custom_data`` once; anything a valid signature does not prove writes nothing."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from app.spotlights.admob_keys import VerifierKeys
from tests.support.scripts_helpers import snapshot
from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401 (fixtures)
from tests.unit.spotlights.test_admob import KEY_ID, PARAMS, keys_json, new_key, signed_query
from tests.unit.spotlights.test_rewards import _earned, _intent

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)

AD_UNIT = dict(PARAMS)["ad_unit"]  # the ad unit of the callbacks the tests sign


@pytest.fixture
async def admob(svc: Svc, tmp_path: Path) -> AsyncIterator[ec.EllipticCurvePrivateKey]:  # noqa: F811
    """AdMob's signing key, its public half in a keys file svc reads (``file://``), and
    the ad unit of ``PARAMS`` in ``SVC_ADMOB_AD_UNITS``."""
    key = new_key()
    keys = tmp_path / "verifier-keys.json"
    keys.write_bytes(keys_json((KEY_ID, key)))
    services = svc.services
    services.settings = msgspec.structs.replace(services.settings, admob_ad_units=AD_UNIT)
    await services.admob_keys.close()
    services.admob_keys = VerifierKeys(f"file://{keys}", services.redis, services.layout)
    yield key
    await services.admob_keys.close()


def _query(key: ec.EllipticCurvePrivateKey, intent: str, **changed: str) -> bytes:
    values = {**dict(PARAMS), "custom_data": intent, "timestamp": str(int(time.time() * 1000))}
    values.update(changed)
    return signed_query(key, params=list(values.items()))


async def _callback(client: httpx.AsyncClient, query: bytes) -> httpx.Response:
    return await client.get("/v1/spotlights/admob?" + query.decode())


async def test_a_signed_callback_rewards_its_intent_once(
    svc: Svc,  # noqa: F811
    admob: ec.EllipticCurvePrivateKey,
) -> None:
    key = svc.account.live_key
    async with svc.client() as client:
        query = _query(admob, await _intent(client, key), transaction_id="tx-1")
        first = await _callback(client, query)
        assert first.status_code == 200, first.text
        assert first.json()["rewarded"] is True
        again = await _callback(client, query)  # AdMob's retry
        assert again.json()["reason"] == "duplicate"
        assert await _earned(client, key) == 5_000
    grant = await svc.services.store.get_grant(f"admob:{svc.account.pid}:tx-1")
    assert grant is not None


async def test_what_the_signature_does_not_prove_writes_nothing(
    svc: Svc,  # noqa: F811
    admob: ec.EllipticCurvePrivateKey,
) -> None:
    key = svc.account.live_key
    async with svc.client() as client:
        intent = await _intent(client, key)
        good = _query(admob, intent, transaction_id="tx-2")
        tampered = good.replace(b"reward_amount=1", b"reward_amount=9")
        assert (await _callback(client, tampered)).status_code == 401
        assert (await _callback(client, _query(new_key(), intent))).status_code == 401
        cut = good[: good.index(b"&key_id=")]
        assert (await _callback(client, cut)).status_code == 400
        unknown = good.replace(f"key_id={KEY_ID}".encode(), b"key_id=42")
        assert (await _callback(client, unknown)).status_code == 401
        stale = _query(admob, intent, timestamp=str(int((time.time() - 7_200) * 1000)))
        answer = await _callback(client, stale)
        assert (answer.status_code, answer.json()["error"]["code"]) == (400, "invalid_intent")
        foreign = _query(admob, intent[:-6] + "AAAAAA")
        assert (await _callback(client, foreign)).status_code == 400
        assert await _earned(client, key) == 0
        # the intent was never used: the true callback still rewards it
        assert (await _callback(client, good)).json()["rewarded"] is True


async def test_ad_units_outside_the_allowlist_do_not_reward(
    svc: Svc,  # noqa: F811
    admob: ec.EllipticCurvePrivateKey,
) -> None:
    services = svc.services
    services.settings = msgspec.structs.replace(services.settings, admob_ad_units="999, 888")
    key = svc.account.live_key
    async with svc.client() as client:
        outside = await _callback(client, _query(admob, await _intent(client, key)))
        assert (outside.status_code, outside.json()["error"]["param"]) == (400, "ad_unit")
        inside = _query(admob, await _intent(client, key), ad_unit="888", transaction_id="tx-3")
        assert (await _callback(client, inside)).json()["rewarded"] is True
        assert await _earned(client, key) == 5_000


async def test_without_an_ad_unit_list_the_route_is_off(
    svc: Svc,  # noqa: F811
    admob: ec.EllipticCurvePrivateKey,
) -> None:
    # Google signs every publisher's callbacks with the same keys: a callback of anyone's
    # ad unit carrying an intent of the account's is signed as well as the operator's own
    services = svc.services
    services.settings = msgspec.structs.replace(services.settings, admob_ad_units=" , ")
    key = svc.account.live_key
    async with svc.client() as client:
        query = _query(admob, await _intent(client, key), ad_unit="666", transaction_id="tx-x")
        off = await _callback(client, query)
        assert (off.status_code, off.json()["error"]["code"]) == (404, "not_found"), off.text
        assert "SVC_ADMOB_AD_UNITS" in off.json()["error"]["message"]
        assert await _earned(client, key) == 0
    assert services.admob_keys.fetches == 0  # refused before any key is looked at
    assert await services.store.get_grant(f"admob:{svc.account.pid}:tx-x") is None


class _Clock:
    """The verifier keys' monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_key_server_down_is_503_and_a_later_retry_rewards_once(
    svc: Svc,  # noqa: F811
    tmp_path: Path,
) -> None:
    signing = new_key()
    keys_file = tmp_path / "served-later.json"  # the key server: nothing there yet
    services = svc.services
    services.settings = msgspec.structs.replace(services.settings, admob_ad_units=AD_UNIT)
    clock = _Clock()
    await services.admob_keys.close()
    services.admob_keys = VerifierKeys(
        f"file://{keys_file}", services.redis, services.layout, clock=clock
    )
    key = svc.account.live_key
    async with svc.client() as client:
        query = _query(signing, await _intent(client, key), transaction_id="tx-down")
        down = await _callback(client, query)
        assert (down.status_code, down.json()["error"]["code"]) == (503, "service_unavailable")
        keys_file.write_bytes(keys_json((KEY_ID, signing)))
        # AdMob retries the callback later: past the refetch interval, the keys are fetched
        clock.now += services.admob_keys.refetch_interval_s + 1
        retried = await _callback(client, query)
        assert retried.json()["rewarded"] is True, retried.text
        assert (await _callback(client, query)).json()["reason"] == "duplicate"
        assert await _earned(client, key) == 5_000
    await services.admob_keys.close()


def _mutations(query: bytes, rng: random.Random, count: int) -> list[bytes]:
    """``count`` different queries, each ``query`` with its signed part or its signature
    changed at random: a byte flipped, inserted or deleted, or two parameters swapped."""
    signed, _, rest = query.partition(b"&signature=")
    signature, _, key_id = rest.partition(b"&key_id=")
    found: set[bytes] = set()
    while len(found) < count:
        parts = [bytearray(signed), bytearray(signature)]
        part = parts[rng.randrange(2)]
        move = rng.randrange(4)
        at = rng.randrange(len(part))
        if move == 0:
            part[at] = rng.randrange(32, 127)
        elif move == 1:
            part.insert(at, rng.randrange(32, 127))
        elif move == 2:
            del part[at]
        else:
            params = bytes(parts[0]).split(b"&")
            i, j = rng.sample(range(len(params)), 2)
            params[i], params[j] = params[j], params[i]
            parts[0] = bytearray(b"&".join(params))
        mutated = bytes(parts[0]) + b"&signature=" + bytes(parts[1]) + b"&key_id=" + key_id
        if mutated != query:
            found.add(mutated)
    return sorted(found)


async def test_random_changes_to_a_signed_callback_never_reward(
    svc: Svc,  # noqa: F811
    admob: ec.EllipticCurvePrivateKey,
) -> None:
    """The property at the route: of 150 random changes to a true callback's signed bytes
    or signature, none rewards, none writes anything; the true one still rewards."""
    key = svc.account.live_key
    async with svc.client() as client:
        good = _query(admob, await _intent(client, key), transaction_id="tx-fuzz")
        await svc.services.admob_keys.key(KEY_ID)  # the keys cached before the snapshot
        before = await snapshot(svc.services)  # type: ignore[arg-type]
        for mutated in _mutations(good, random.Random(32), 150):
            answer = await client.get("/v1/spotlights/admob?" + mutated.decode("latin-1"))
            assert answer.status_code in (400, 401), (mutated, answer.text)
        assert await snapshot(svc.services) == before  # type: ignore[arg-type]
        assert (await _callback(client, good)).json()["rewarded"] is True
