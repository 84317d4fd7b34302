"""The Google Play routes while Google Play is off (the default): 404 in the API's shape,
after the key's checks, with nothing written."""

from __future__ import annotations

import pytest

from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401 (fixtures)

# create_app registers routes whose parameters use spellings Litestar 2.23+ deprecates
pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
BODY = {"product_id": "credits_small", "purchase_token": "tok"}


async def test_google_play_is_404_until_configured(svc: Svc) -> None:  # noqa: F811
    live = {"authorization": f"Bearer {svc.account.live_key}"}
    test = {"authorization": f"Bearer {svc.account.test_key}"}
    async with svc.client() as client:
        off = await client.post("/v1/purchases/google", json=BODY, headers=live)
        assert (off.status_code, off.json()["error"]["code"]) == (404, "not_found")
        assert "SVC_GOOGLE_PACKAGE_NAME" in off.json()["error"]["message"]
        forbidden = await client.post("/v1/purchases/google", json=BODY, headers=test)
        assert forbidden.status_code == 403
        anonymous = await client.post("/v1/purchases/google", json=BODY)
        assert anonymous.status_code == 401
        notified = await client.post("/v1/purchases/google/notifications", json={"message": {}})
        assert (notified.status_code, notified.json()["error"]["code"]) == (404, "not_found")
    assert [
        e for e in await svc.services.store.list_grants(svc.account.pid) if e.source == "google"
    ] == []
