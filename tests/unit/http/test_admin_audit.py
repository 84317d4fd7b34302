"""The operators' audit log through the admin API in process (issue 45 item 4): each route
that changes money, a key or an account's status writes one entry naming the action, its
target, the request's id and the client's address; a refused one writes none; pages and
the account filter; a grant's reason."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.accounts.bodies import MAX_GRANT_REASON, KeyCreateRequest
from app.keys.throttle import parse_networks
from tests.unit.http.test_http_routes import Svc, assert_error, models_file, svc

__all__ = ["models_file", "svc"]  # the fixtures this module borrows

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
ADMIN = {"authorization": "Bearer test-admin-token"}
ADDRESS = "203.0.113.10"  # Svc.client's


async def _admin(
    client: httpx.AsyncClient, method: str, path: str, body: Any = None, **headers: str
) -> httpx.Response:
    return await client.request(method, f"/admin/v1{path}", json=body, headers={**ADMIN, **headers})


async def _log(client: httpx.AsyncClient, query: str = "") -> list[dict[str, Any]]:
    page = await _admin(client, "GET", f"/audit{query}")
    assert page.status_code == 200, page.text
    data: list[dict[str, Any]] = page.json()["data"]
    return data


async def test_each_operator_action_writes_one_entry(svc: Svc) -> None:
    async with svc.client() as client:
        made = await _admin(client, "POST", "/accounts")
        pid = made.json()["account_pid"]
        steps = [
            (made, "account.create", pid, {}),
            (
                await _admin(
                    client, "POST", f"/accounts/{pid}/grants", {"credits": 7, "reason": "PO 42"}
                ),
                "credits.grant",
                None,
                {"credits": 7, "pool": "purchased", "reason": "PO 42"},
            ),
        ]
        key = await _admin(
            client,
            "POST",
            f"/accounts/{pid}/api-keys",
            {"name": "ops", "environment": "live", "daily_cap_credits": None},
        )
        assert key.status_code == 201, key.text
        key_id = key.json()["id"]
        steps.append(
            (
                key,
                "key.create",
                key_id,
                {"name": "ops", "environment": "live"},
            )
        )
        update = await _admin(
            client, "PATCH", f"/accounts/{pid}/api-keys/{key_id}", {"rate_limit_rpm": 9}
        )
        steps.append((update, "key.update", key_id, {"rate_limit_rpm": 9}))
        rotate = await _admin(
            client, "POST", f"/accounts/{pid}/api-keys/{key_id}/rotate", {"grace_seconds": 5}
        )
        new_id = rotate.json()["id"]
        steps.append((rotate, "key.rotate", key_id, {"new_key_id": new_id, "grace_seconds": 5}))
        revoke = await _admin(client, "DELETE", f"/accounts/{pid}/api-keys/{new_id}")
        steps.append((revoke, "key.revoke", new_id, {"name": "ops"}))
        spot = await _admin(client, "POST", f"/accounts/{pid}/spotlights", {"view_id": "v-1"})
        steps.append((spot, "spotlight.grant", None, {"pool": "earned", "view_id": "v-1"}))
        for status, action in (("disabled", "account.disable"), ("active", "account.enable")):
            changed = await _admin(client, "PATCH", f"/accounts/{pid}", {"status": status})
            steps.append((changed, action, pid, {"status": status}))
        entries = await _log(client, f"?account={pid}")
    assert len(entries) == len(steps)
    for entry, (response, action, target, details) in zip(entries, steps[::-1], strict=True):
        assert response.status_code in (200, 201), response.text
        assert entry["object"] == "audit.entry"
        assert entry["id"].startswith("audit_")
        assert (entry["action"], entry["account_pid"], entry["actor"]) == (
            action,
            pid,
            "admin_api",
        )
        if target is not None:
            assert entry["target"] == target
        assert entry["request_id"] == response.headers["x-request-id"]
        assert entry["client_address"] == ADDRESS
        assert details.items() <= entry["details"].items()
        assert isinstance(entry["created_at"], int)
    grant = entries[-2]
    assert grant["target"].startswith("grant_")
    stored = await svc.services.store.get_grant(grant["target"])
    assert stored is not None
    assert stored.reason == "PO 42"
    # never a secret: no key, no hash in any entry
    text = str(entries)
    assert key.json()["key"] not in text
    assert rotate.json()["key"] not in text


async def test_a_refused_action_writes_no_entry(svc: Svc) -> None:
    pid = svc.account.pid
    async with svc.client() as client:
        before = await _log(client)
        long_reason = "x" * (MAX_GRANT_REASON + 1)
        for body, param in (
            ({"credits": 5, "reason": 5}, "reason"),
            ({"credits": 5, "reason": long_reason}, "reason"),
        ):
            refused = await _admin(client, "POST", f"/accounts/{pid}/grants", body)
            assert_error(refused, 400, "invalid_request_error", "invalid_value")
            assert refused.json()["error"]["param"] == param
        missing = await _admin(client, "POST", "/accounts/acct_nope/grants", {"credits": 5})
        assert missing.status_code == 404
        unknown = await _admin(client, "PATCH", f"/accounts/{pid}/api-keys/key_nope", {"name": "x"})
        assert unknown.status_code == 404
        gone = await _admin(
            client, "DELETE", f"/accounts/{pid}/api-keys/{svc.account.spare_key_id}"
        )
        assert gone.status_code == 200
        after_revoke = await _log(client)
        again = await _admin(
            client, "DELETE", f"/accounts/{pid}/api-keys/{svc.account.spare_key_id}"
        )
        assert again.status_code == 200  # idempotent, and changes nothing: no entry
        rotate = await _admin(
            client, "POST", f"/accounts/{pid}/api-keys/{svc.account.spare_key_id}/rotate", {}
        )
        assert rotate.status_code == 409
        bad_status = await _admin(client, "PATCH", f"/accounts/{pid}", {"status": "gone"})
        assert bad_status.status_code == 400
        # a key made through /v1 by the account's own key is no operator's action
        made = await client.post(
            "/v1/api-keys",
            json={"name": "mine", "environment": "live", "daily_cap_credits": None},
            headers={"authorization": f"Bearer {svc.account.live_key}"},
        )
        assert made.status_code == 201, made.text
        final = await _log(client)
    assert [e["action"] for e in after_revoke] == ["key.revoke", *[e["action"] for e in before]]
    assert final == after_revoke


async def test_pages_newest_first_and_the_account_filter(svc: Svc) -> None:
    accounts = svc.services.accounts
    async with svc.client() as client:
        pids = [(await _admin(client, "POST", "/accounts")).json()["account_pid"] for _ in range(3)]
        for pid in pids:
            await _admin(client, "POST", f"/accounts/{pid}/grants", {"credits": 1})
        seen: list[dict[str, Any]] = []
        after = None
        while True:
            query = "?limit=2" + (f"&after={after}" if after else "")
            page = await _admin(client, "GET", f"/audit{query}")
            body = page.json()
            assert len(body["data"]) <= 2
            seen += body["data"]
            if not body["has_more"]:
                break
            after = body["last_id"]
        mine = await _log(client, f"?account={pids[1]}")
        other = await _log(client, f"?account={pids[0]}")
        cross = await _admin(client, "GET", f"/audit?account={pids[1]}&after={other[0]['id']}")
        bad = [
            await _admin(client, "GET", f"/audit?{query}")
            for query in ("limit=0", "limit=501", "limit=x", "after=audit_1", "after=nope")
        ]
    assert [e["id"] for e in seen] == [e["id"] for e in await_all(seen)]
    assert [(e["action"], e["account_pid"]) for e in seen] == [
        (action, pid) for action in ("credits.grant", "account.create") for pid in pids[::-1]
    ]
    assert [e["action"] for e in mine] == ["credits.grant", "account.create"]
    assert_error(cross, 400, "invalid_request_error", "invalid_value")
    for response in bad:
        assert_error(response, 400, "invalid_request_error", "invalid_value")
    assert await accounts.store.get_account(pids[0]) is not None


def await_all(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries sorted newest first by their order (the digits of the id)."""
    return sorted(entries, key=lambda e: int(e["id"].removeprefix("audit_")), reverse=True)


async def test_the_client_address_is_the_trusted_proxy_s_forwarded_one(svc: Svc) -> None:
    svc.services.trusted_proxies = parse_networks("203.0.113.0/24")
    async with svc.client() as client:
        made = await _admin(client, "POST", "/accounts", **{"x-forwarded-for": "198.51.100.7"})
        entries = await _log(client)
    assert entries[0]["target"] == made.json()["account_pid"]
    assert entries[0]["client_address"] == "198.51.100.7"


async def test_keys_made_by_the_fixture_are_not_audited(svc: Svc) -> None:
    await svc.services.api_keys.create_key(
        svc.account.pid, KeyCreateRequest(name="direct", environment="live", daily_cap_credits=None)
    )
    async with svc.client() as client:
        assert await _log(client) == []


async def test_an_account_s_external_id_is_audited_at_creation_and_when_set(svc: Svc) -> None:
    async with svc.client() as client:
        made = await _admin(client, "POST", "/accounts", {"external_id": "user-1"})
        assert made.status_code == 201, made.text
        pid = made.json()["account_pid"]
        taken = await _admin(client, "POST", "/accounts", {"external_id": "user-1"})
        assert_error(taken, 409, "invalid_request_error", "external_id_taken")
        moved = await _admin(client, "PATCH", f"/accounts/{pid}", {"external_id": "user-2"})
        cleared = await _admin(client, "PATCH", f"/accounts/{pid}", {"external_id": None})
        await _admin(client, "PATCH", f"/accounts/{svc.account.pid}", {"external_id": "user-3"})
        refused = await _admin(client, "PATCH", f"/accounts/{pid}", {"external_id": "user-3"})
        both = await _admin(
            client, "PATCH", f"/accounts/{pid}", {"external_id": "user-4", "status": "disabled"}
        )
        entries = await _log(client)
    assert_error(refused, 409, "invalid_request_error", "external_id_taken")
    assert [(e["action"], e["account_pid"], e["details"]) for e in entries] == [
        ("account.disable", pid, {"status": "disabled"}),
        ("account.update", pid, {"external_id": "user-4"}),
        ("account.update", svc.account.pid, {"external_id": "user-3"}),
        ("account.update", pid, {"external_id": None}),
        ("account.update", pid, {"external_id": "user-2"}),
        ("account.create", pid, {"external_id": "user-1"}),
    ]
    for response, entry in ((cleared, entries[3]), (moved, entries[4]), (made, entries[5])):
        assert entry["request_id"] == response.headers["x-request-id"]
        assert entry["target"] == pid
    assert both.json()["external_id"] == "user-4"
