"""``GET /v1/spotlights/admob`` in process: AdMob's signed callback rewards the intent in its
``custom_data`` once; anything a valid signature does not prove writes nothing."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from app.spotlights.admob import VerifierKeys
from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401 (fixtures)
from tests.unit.spotlights.test_admob import KEY_ID, PARAMS, keys_json, new_key, signed_query
from tests.unit.spotlights.test_rewards import _earned, _intent

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)


@pytest.fixture
async def admob(svc: Svc, tmp_path: Path) -> AsyncIterator[ec.EllipticCurvePrivateKey]:  # noqa: F811
    """AdMob's signing key, its public half in a keys file svc reads (``file://``)."""
    key = new_key()
    keys = tmp_path / "verifier-keys.json"
    keys.write_bytes(keys_json((KEY_ID, key)))
    services = svc.services
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
    grant = await svc.services.store.get_grant("admob:tx-1")
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
