"""Key roles and what a key may grant (issue 30, items 5 and 6), through the HTTP routes in
process: an ``inference`` key cannot manage keys or webhooks, a key never grants more than
it has (its own limits included), and rotations count their grace periods toward the
account's active-key limit."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from app.core.clock import parse_iso_utc
from tests.unit.http.test_http_routes import CHAT, CHAT_BODY, Svc, assert_error, models_file, svc

__all__ = ["models_file", "svc"]  # the fixtures this module borrows

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
HOOK = {"url": "https://hooks.example.com/svc", "events": ["key.revoked"]}


def _h(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def _create(client: httpx.AsyncClient, key: str, **fields: Any) -> httpx.Response:
    body = {"name": "k", "environment": "live", "daily_cap_credits": None, **fields}
    return await client.post("/v1/api-keys", json=body, headers=_h(key))


def _denied(response: httpx.Response, param: str | None = None) -> None:
    assert_error(response, 403, "permission_error", "permission_denied")
    assert response.json()["error"]["param"] == param


async def test_keys_made_through_the_api_are_inference_keys_unless_asked(svc: Svc) -> None:
    admin = svc.account.live_key  # made by an operator, who asked for admin
    async with svc.client() as client:
        listed = (await client.get("/v1/api-keys", headers=_h(admin))).json()["data"]
        roles = {item["name"]: item["role"] for item in listed}
        assert roles == {"live": "admin", "test": "inference", "spare": "inference"}
        made = await _create(client, admin)
        assert made.status_code == 201, made.text
        assert made.json()["role"] == "inference"
        asked = await _create(client, admin, role="admin")
        assert asked.json()["role"] == "admin"
        bad = await _create(client, admin, role="owner")
        assert_error(bad, 400, "invalid_request_error", "invalid_value")


async def test_an_operator_s_keys_are_inference_keys_unless_asked(svc: Svc) -> None:
    """Issue 44, item 8: least privilege by default, for operators too (the admin API here,
    the CLI in tests/e2e/test_admin_cli.py)."""
    path = f"/admin/v1/accounts/{svc.account.pid}/api-keys"
    admin_token = {"authorization": "Bearer test-admin-token"}
    async with svc.client() as client:
        body = {"name": "app", "environment": "live", "daily_cap_credits": None}
        made = await client.post(path, json=body, headers=admin_token)
        assert made.status_code == 201, made.text
        assert made.json()["role"] == "inference"
        _denied(await _create(client, made.json()["key"]))  # it cannot manage keys
        asked = await client.post(path, json={**body, "role": "admin"}, headers=admin_token)
        assert asked.json()["role"] == "admin"
        assert (await _create(client, asked.json()["key"])).status_code == 201


async def test_an_inference_key_uses_the_api_and_changes_nothing(svc: Svc) -> None:
    async with svc.client() as client:
        made = (await _create(client, svc.account.live_key, name="app")).json()
        key, kid = made["key"], made["id"]
        # what it may do: requests, and reading the account
        for path in ("/v1/models", "/v1/credits", "/v1/usage", "/v1/activity", "/v1/api-keys"):
            assert (await client.get(path, headers=_h(key))).status_code == 200, path
        assert (await client.get("/v1/webhooks", headers=_h(key))).status_code == 200
        chat = await client.post(CHAT, json=CHAT_BODY, headers=_h(key))
        assert chat.status_code == 200
        assert "credits_used" in chat.text
        # what it may not: manage keys or webhooks, itself included
        _denied(await _create(client, key))
        _denied(await client.patch(f"/v1/api-keys/{kid}", json={"name": "x"}, headers=_h(key)))
        _denied(
            await client.patch(
                f"/v1/api-keys/{kid}", json={"daily_cap_credits": None}, headers=_h(key)
            )
        )
        _denied(await client.post(f"/v1/api-keys/{kid}/rotate", headers=_h(key)))
        _denied(await client.delete(f"/v1/api-keys/{svc.account.spare_key_id}", headers=_h(key)))
        _denied(await client.post("/v1/webhooks", json=HOOK, headers=_h(key)))
        listed = (await client.get("/v1/api-keys", headers=_h(key))).json()["data"]
        assert len(listed) == 4  # nothing was created
        assert {k["id"]: k["status"] for k in listed}[svc.account.spare_key_id] == "active"


async def test_a_capped_admin_key_cannot_lift_its_own_limits_or_grant_more(svc: Svc) -> None:
    """A key handed to an app with a 100-credit cap, two models and 10 rpm."""
    async with svc.client() as client:
        made = await _create(
            client,
            svc.account.live_key,
            name="mobile",
            daily_cap_credits=100,
            allowed_models=["svc-fast", "svc-code"],
            rate_limit_rpm=10,
            expires_at="2099-01-01T00:00:00Z",
            role="admin",
        )
        assert made.status_code == 201, made.text
        key, kid = made.json()["key"], made.json()["id"]
        me = f"/v1/api-keys/{kid}"
        # its own limits stay
        _denied(
            await client.patch(me, json={"daily_cap_credits": None}, headers=_h(key)),
            "daily_cap_credits",
        )
        _denied(
            await client.patch(me, json={"daily_cap_credits": 101}, headers=_h(key)),
            "daily_cap_credits",
        )
        _denied(
            await client.patch(me, json={"allowed_models": None}, headers=_h(key)),
            "allowed_models",
        )
        _denied(
            await client.patch(
                me, json={"allowed_models": ["svc-fast", "svc-smart"]}, headers=_h(key)
            ),
            "allowed_models",
        )
        _denied(
            await client.patch(me, json={"rate_limit_rpm": None}, headers=_h(key)),
            "rate_limit_rpm",
        )
        _denied(await client.patch(me, json={"expires_at": None}, headers=_h(key)), "expires_at")
        # it may lower them, and rename itself
        lowered = await client.patch(
            me, json={"daily_cap_credits": 80, "name": "mobile 2"}, headers=_h(key)
        )
        assert lowered.status_code == 200, lowered.text
        assert lowered.json()["daily_cap_credits"] == 80
        # keys it creates stay within it
        _denied(await _create(client, key), "daily_cap_credits")
        _denied(
            await _create(client, key, daily_cap_credits=50, allowed_models=["svc-fast"]),
            "rate_limit_rpm",
        )
        within = await _create(
            client,
            key,
            daily_cap_credits=50,
            allowed_models=["svc-fast"],
            rate_limit_rpm=5,
            expires_at="2098-01-01T00:00:00Z",
        )
        assert within.status_code == 201, within.text
        assert within.json()["role"] == "inference"
        # the owner's unlimited keys are out of its reach: no rotating them into a secret
        # with no limits, no revoking or changing them
        spare = svc.account.spare_key_id
        out_of_reach = "daily_cap_credits"
        _denied(await client.post(f"/v1/api-keys/{spare}/rotate", headers=_h(key)), out_of_reach)
        _denied(await client.delete(f"/v1/api-keys/{spare}", headers=_h(key)), out_of_reach)
        _denied(
            await client.patch(f"/v1/api-keys/{spare}", json={"name": "x"}, headers=_h(key)),
            out_of_reach,
        )
        # an owner's admin key can do all of it
        lifted = await client.patch(
            me, json={"daily_cap_credits": None}, headers=_h(svc.account.live_key)
        )
        assert lifted.status_code == 200
        assert lifted.json()["daily_cap_credits"] is None


async def test_an_inference_admin_cannot_make_admin_keys_by_rotation(svc: Svc) -> None:
    """Rotation takes a role; a key's successor never gets more than the rotating key."""
    async with svc.client() as client:
        capped = (
            await _create(
                client, svc.account.live_key, daily_cap_credits=10, role="admin", name="ops"
            )
        ).json()
        app_key = (await _create(client, capped["key"], daily_cap_credits=5, name="app")).json()
        assert app_key["role"] == "inference"
        rotated = await client.post(
            f"/v1/api-keys/{app_key['id']}/rotate",
            json={"grace_seconds": 0},
            headers=_h(capped["key"]),
        )
        assert rotated.status_code == 201, rotated.text
        assert rotated.json()["role"] == "inference"
        promoted = await client.post(
            f"/v1/api-keys/{rotated.json()['id']}/rotate",
            json={"role": "admin"},
            headers=_h(capped["key"]),
        )
        assert promoted.status_code == 201, promoted.text  # admin within the cap of 10: allowed
        assert promoted.json()["role"] == "admin"


@pytest.mark.parametrize("grace", [0, 7 * 86_400])
async def test_rotation_chains_never_pass_the_active_key_limit(svc: Svc, grace: int) -> None:
    """Issue 30, item 6: keys in their grace period count toward SVC_MAX_ACTIVE_KEYS. A
    rotation with a grace at the limit is refused (400 api_key_limit_reached); one without
    a grace ends the old key as the new one starts, so it is always possible."""
    limit = svc.services.api_keys.max_active_keys = 6
    owner = svc.account.live_key
    async with svc.client() as client:
        made = (await _create(client, owner, name="rotated")).json()
        current, refused = made["id"], 0
        for _ in range(20):
            answer = await client.post(
                f"/v1/api-keys/{current}/rotate",
                json={"grace_seconds": grace},
                headers=_h(owner),
            )
            if answer.status_code == 400:
                assert_error(answer, 400, "invalid_request_error", "api_key_limit_reached")
                assert "grace_seconds 0" in answer.json()["error"]["message"]
                refused += 1
                continue
            assert answer.status_code == 201, answer.text
            current = answer.json()["id"]
            listed = (await client.get("/v1/api-keys", headers=_h(owner))).json()["data"]
            active = [k for k in listed if k["status"] == "active" and not _expired(k)]
            assert len(active) <= limit
        # with a grace: the account had 4 keys, 2 rotations fill it, the rest are refused
        assert refused == (0 if grace == 0 else 18)


def _expired(item: dict[str, Any]) -> bool:
    expires = item["expires_at"]
    if expires is None:
        return False
    seconds = parse_iso_utc(expires)
    assert seconds is not None
    return seconds <= time.time()
