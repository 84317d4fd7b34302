"""The admin API's account lookups, status and key revocation (issue 33 item 3), through the
HTTP routes in process: a page of accounts and what ``query`` finds, one account whole,
disabling (every key refused at once, on every route) and enabling, revoking any key."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.accounts.bodies import KeyCreateRequest
from app.keys.format import kid_from_public_id
from tests.unit.http.test_http_routes import (
    CHAT,
    CHAT_BODY,
    FAILED_AUTH_LIMIT,
    KEY_ROUTES,
    Svc,
    assert_error,
    call,
    models_file,
    svc,
)

__all__ = ["models_file", "svc"]  # the fixtures this module borrows

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
ADMIN = {"authorization": "Bearer test-admin-token"}


async def _admin(
    client: httpx.AsyncClient, method: str, path: str, body: Any = None
) -> httpx.Response:
    return await client.request(method, f"/admin/v1{path}", json=body, headers=ADMIN)


def _h(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_accounts_are_listed_newest_first_a_page_at_a_time(svc: Svc) -> None:
    made = [await svc.services.accounts.create_account() for _ in range(4)]
    seen: list[dict[str, Any]] = []
    after: str | None = None
    async with svc.client() as client:
        while True:
            query = "?limit=2" + (f"&after={after}" if after else "")
            page = await _admin(client, "GET", f"/accounts{query}")
            assert page.status_code == 200, page.text
            body = page.json()
            assert body["object"] == "list"
            assert len(body["data"]) <= 2
            assert (body["first_id"], body["last_id"]) == (
                body["data"][0]["id"],
                body["data"][-1]["id"],
            )
            seen += body["data"]
            if not body["has_more"]:
                break
            after = body["last_id"]
    assert sorted(a["id"] for a in seen) == sorted([svc.account.pid, *made])  # each once
    created = [a["created_at"] for a in seen]
    assert created == sorted(created, reverse=True)
    assert {(a["object"], a["status"]) for a in seen} == {("account", "active")}
    assert set(seen[0]) == {"id", "object", "created_at", "status", "external_id"}
    assert {a["external_id"] for a in seen} == {None}


async def test_a_query_finds_an_account_by_its_id_a_key_id_or_last4(svc: Svc) -> None:
    pid, spare = svc.account.pid, svc.account.spare_key_id
    other = await svc.services.accounts.create_account()
    listed = (await svc.services.api_keys.list_keys(pid)).data
    last4 = next(k.last4 for k in listed if k.id == spare)
    async with svc.client() as client:
        for query in (pid, spare, kid_from_public_id(spare), last4):
            found = await _admin(client, "GET", f"/accounts?query={query}")
            assert found.status_code == 200, found.text
            assert pid in [a["id"] for a in found.json()["data"]], query
            assert other not in [a["id"] for a in found.json()["data"]], query
        for query in ("acct_nope", "key_AAAAAAAAAAAA", "zz"):
            found = await _admin(client, "GET", f"/accounts?query={query}")
            assert found.json()["data"] == [], query
        found = (await _admin(client, "GET", f"/accounts?query={other}")).json()["data"]
    assert [(a["id"], a["object"], a["status"]) for a in found] == [(other, "account", "active")]


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=x", "limit"),
        ("after=acct_nope", "after"),
        ("query=" + "a" * 65, "query"),
        ("query=%00", "query"),
    ],
)
async def test_a_bad_page_parameter_is_400_naming_it(svc: Svc, query: str, param: str) -> None:
    async with svc.client() as client:
        response = await _admin(client, "GET", f"/accounts?{query}")
    assert_error(response, 400, "invalid_request_error", "invalid_value")
    assert response.json()["error"]["param"] == param


async def test_an_account_shows_its_status_balance_keys_and_day(svc: Svc) -> None:
    pid, live = svc.account.pid, svc.account.live_key
    async with svc.client() as client:
        chat = await call(client, "POST", CHAT, live, CHAT_BODY)
        assert chat.status_code == 200
        shown = await _admin(client, "GET", f"/accounts/{pid}")
        credits = await client.get("/v1/credits", headers=_h(live))
        keys = await client.get("/v1/api-keys", headers=_h(live))
    assert shown.status_code == 200, shown.text
    body = shown.json()
    assert (body["id"], body["object"], body["status"]) == (pid, "account", "active")
    assert body["credits"] == credits.json()
    assert body["keys"] == keys.json()["data"]  # never a secret
    assert all("key" not in k and k["id"].startswith("key_") for k in body["keys"])
    spent = 100_000 - credits.json()["total_available"]
    assert spent > 0
    assert body["usage_today"]["credits_spent"] == spent
    assert body["usage_today"]["requests_count"] == 1


async def test_a_disabled_account_s_keys_are_refused_at_once_on_every_route(svc: Svc) -> None:
    pid = svc.account.pid
    async with svc.client() as client:
        # the worker has every key's identity cached: the status is read in Redis anyway
        for key in (svc.account.live_key, svc.account.test_key):
            assert (await call(client, "GET", "/v1/models", key)).status_code == 200
        disabled = await _admin(client, "PATCH", f"/accounts/{pid}", {"status": "disabled"})
        assert disabled.status_code == 200, disabled.text
        assert disabled.json()["status"] == "disabled"
        for key in (svc.account.live_key, svc.account.test_key):
            for method, path, body, _ in KEY_ROUTES:
                response = await call(client, method, path, key, body, svc)
                assert_error(response, 403, "permission_error", "account_disabled")
        listed = await _admin(client, "GET", f"/accounts?query={pid}")
        assert listed.json()["data"][0]["status"] == "disabled"
        # the operator still sees and funds it
        assert (await _admin(client, "GET", f"/accounts/{pid}/credits")).status_code == 200
        enabled = await _admin(client, "PATCH", f"/accounts/{pid}", {"status": "active"})
        assert enabled.json()["status"] == "active"
        for method, path, body, ok in KEY_ROUTES:
            response = await call(client, method, path, svc.account.live_key, body, svc)
            assert response.status_code == ok, (path, response.text)
    assert (await svc.services.store.get_account(pid)).status == "active"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"status": "frozen"}, "status"),
        ({"status": None}, "status"),
        ({"status": "disabled", "note": "x"}, "note"),
        ({"status": "disabled", "external_id": "has space"}, "external_id"),
        ("disabled", None),
    ],
)
async def test_a_bad_status_is_400_and_changes_nothing(svc: Svc, body: Any, param: str) -> None:
    async with svc.client() as client:
        response = await _admin(client, "PATCH", f"/accounts/{svc.account.pid}", body)
        assert_error(response, 400, "invalid_request_error", "invalid_value")
        if param is not None:
            assert response.json()["error"]["param"] == param
        served = await call(client, "GET", "/v1/models", svc.account.live_key)
    assert served.status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/accounts/acct_nope", None),
        ("PATCH", "/accounts/acct_nope", {"status": "disabled"}),
        ("DELETE", "/accounts/acct_nope/api-keys/key_AAAAAAAAAAAA", None),
    ],
)
async def test_an_unknown_account_is_404(svc: Svc, method: str, path: str, body: Any) -> None:
    async with svc.client() as client:
        response = await _admin(client, method, path, body)
    assert_error(response, 404, "not_found_error", "account_not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/admin/v1/accounts"),
        ("GET", "/admin/v1/accounts/{pid}"),
        ("PATCH", "/admin/v1/accounts/{pid}"),
        ("DELETE", "/admin/v1/accounts/{pid}/api-keys/key_AAAAAAAAAAAA"),
    ],
)
async def test_the_admin_token_is_required(svc: Svc, method: str, path: str) -> None:
    async with svc.client() as client:
        path = path.format(pid=svc.account.pid)
        response = await client.request(method, path, headers=_h(svc.account.live_key))
    assert_error(response, 401, "authentication_error", "invalid_admin_token")


async def test_the_right_admin_token_is_refused_after_the_address_s_wrong_ones(
    svc: Svc,
) -> None:
    """Issue 44, item 9: FAILED_AUTH_LIMIT wrong admin tokens, and the address is refused
    the right one (429) until its window ends; another address is served."""
    wrong = {"authorization": "Bearer " + "w" * 40}
    async with svc.client("198.51.100.20") as guesser:
        for _ in range(FAILED_AUTH_LIMIT):
            response = await guesser.get("/admin/v1/accounts", headers=wrong)
            assert_error(response, 401, "authentication_error", "invalid_admin_token")
        right = await guesser.get("/admin/v1/accounts", headers=ADMIN)
        assert_error(right, 429, "rate_limit_error", "auth_rate_limited")
        assert 0 < int(right.headers["retry-after"]) <= 600
    async with svc.client("198.51.100.21") as operator:
        assert (await operator.get("/admin/v1/accounts", headers=ADMIN)).status_code == 200


async def test_wrong_api_keys_never_lock_the_admin_token_out(svc: Svc) -> None:
    """Issue 44 review: behind a balancer (or a NAT) one address is everyone; its wrong API
    keys are throttled on their own counter and never refuse the right admin token."""
    async with svc.client("198.51.100.22") as crowd:
        for _ in range(FAILED_AUTH_LIMIT * 3):
            await call(crowd, "GET", "/v1/models", "svc_live_" + "x" * 50)
        wrong_key = await call(crowd, "GET", "/v1/models", "svc_live_" + "x" * 50)
        assert_error(wrong_key, 429, "rate_limit_error", "auth_rate_limited")
        right = await crowd.get("/admin/v1/accounts", headers=ADMIN)
        assert right.status_code == 200, right.text
        # the wrong admin tokens have their own counter: all FAILED_AUTH_LIMIT of them 401
        wrong = {"authorization": "Bearer " + "w" * 40}
        for _ in range(FAILED_AUTH_LIMIT):
            response = await crowd.get("/admin/v1/accounts", headers=wrong)
            assert_error(response, 401, "authentication_error", "invalid_admin_token")
        refused = await crowd.get("/admin/v1/accounts", headers=ADMIN)
        assert_error(refused, 429, "rate_limit_error", "auth_rate_limited")


async def test_an_operator_revokes_any_key_of_the_account_at_once(svc: Svc) -> None:
    accounts, pid = svc.services.accounts, svc.account.pid
    made = await svc.services.api_keys.create_key(
        pid, KeyCreateRequest(name="leaked", environment="live", daily_cap_credits=None)
    )
    other_pid = await accounts.create_account()
    other = await svc.services.api_keys.create_key(
        other_pid, KeyCreateRequest(name="theirs", environment="live", daily_cap_credits=None)
    )
    async with svc.client() as client:
        assert (await call(client, "GET", "/v1/models", made.key)).status_code == 200
        revoked = await _admin(client, "DELETE", f"/accounts/{pid}/api-keys/{made.id}")
        assert revoked.status_code == 200, revoked.text
        assert revoked.json() == {"id": made.id, "object": "api_key", "deleted": True}
        response = await call(client, "POST", CHAT, made.key, CHAT_BODY)
        assert_error(response, 401, "authentication_error", "api_key_revoked")
        again = await _admin(client, "DELETE", f"/accounts/{pid}/api-keys/{made.id}")
        assert again.status_code == 200  # idempotent, as DELETE /v1/api-keys/{id}
        theirs = await _admin(client, "DELETE", f"/accounts/{pid}/api-keys/{other.id}")
        assert_error(theirs, 404, "not_found_error", "api_key_not_found")
        unknown = await _admin(client, "DELETE", f"/accounts/{pid}/api-keys/nope")
        assert_error(unknown, 404, "not_found_error", "api_key_not_found")
        # the account's other keys, and the other account's, are untouched
        assert (await call(client, "GET", "/v1/models", other.key)).status_code == 200
        assert (await call(client, "GET", "/v1/models", svc.account.live_key)).status_code == 200
        listed = (await client.get("/v1/api-keys", headers=_h(svc.account.live_key))).json()
    assert {k["id"]: k["status"] for k in listed["data"]}[made.id] == "revoked"


async def test_an_account_is_created_with_an_external_id_and_found_by_it(svc: Svc) -> None:
    """Issue 45 item 5: the app names its accounts by its own user ids."""
    async with svc.client() as client:
        made = await _admin(client, "POST", "/accounts", {"external_id": "user-42@example.com"})
        assert made.status_code == 201, made.text
        pid = made.json()["account_pid"]
        plain = await client.post("/admin/v1/accounts", headers=ADMIN)  # no body: none
        assert plain.status_code == 201, plain.text
        found = await _admin(client, "GET", "/accounts?external_id=user-42@example.com")
        none = await _admin(client, "GET", "/accounts?external_id=user-43@example.com")
        shown = await _admin(client, "GET", f"/accounts/{pid}")
        other = await _admin(client, "GET", f"/accounts/{plain.json()['account_pid']}")
    assert found.status_code == 200, found.text
    assert [(a["id"], a["external_id"]) for a in found.json()["data"]] == [
        (pid, "user-42@example.com")
    ]
    assert none.json() == {
        "object": "list",
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }
    assert shown.json()["external_id"] == "user-42@example.com"
    assert other.json()["external_id"] is None


async def test_a_taken_external_id_is_409_and_writes_nothing(svc: Svc) -> None:
    async with svc.client() as client:
        first = await _admin(client, "POST", "/accounts", {"external_id": "u1"})
        assert first.status_code == 201, first.text
        before = await svc.services.store.list_accounts()
        again = await _admin(client, "POST", "/accounts", {"external_id": "u1"})
        assert_error(again, 409, "invalid_request_error", "external_id_taken")
        assert again.json()["error"]["param"] == "external_id"
        assert again.headers["x-should-retry"] == "false"
        assert await svc.services.store.list_accounts() == before
        # nor by an update, which changes nothing else it was asked for either
        pid = svc.account.pid
        taken = await _admin(
            client, "PATCH", f"/accounts/{pid}", {"external_id": "u1", "status": "disabled"}
        )
        assert_error(taken, 409, "invalid_request_error", "external_id_taken")
        shown = await _admin(client, "GET", f"/accounts/{pid}")
    assert (shown.json()["external_id"], shown.json()["status"]) == (None, "active")


async def test_an_update_sets_changes_and_clears_the_external_id(svc: Svc) -> None:
    pid = svc.account.pid
    async with svc.client() as client:
        for value in ("u1", "u2", None):
            updated = await _admin(client, "PATCH", f"/accounts/{pid}", {"external_id": value})
            assert updated.status_code == 200, updated.text
            assert (updated.json()["id"], updated.json()["external_id"]) == (pid, value)
        kept = await _admin(client, "PATCH", f"/accounts/{pid}", {"external_id": "u3"})
        status_only = await _admin(client, "PATCH", f"/accounts/{pid}", {"status": "active"})
        old = await _admin(client, "GET", "/accounts?external_id=u1")
    assert kept.json()["external_id"] == "u3"
    assert status_only.json()["external_id"] == "u3"  # left out: kept
    assert old.json()["data"] == []


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/accounts", {"external_id": "has space"}),
        ("POST", "/accounts", {"external_id": "a" * 129}),
        ("POST", "/accounts", {"external_id": "acct_0123456789abcdef"}),
        ("POST", "/accounts", {"external_id": ""}),
        ("GET", "/accounts?external_id=", None),
        ("GET", "/accounts?external_id=%0Au1", None),
        ("GET", "/accounts?external_id=" + "a" * 129, None),
    ],
)
async def test_a_bad_external_id_is_400_naming_it(
    svc: Svc, method: str, path: str, body: Any
) -> None:
    async with svc.client() as client:
        before = await svc.services.store.list_accounts()
        response = await _admin(client, method, path, body)
    assert_error(response, 400, "invalid_request_error", "invalid_value")
    assert response.json()["error"]["param"] == "external_id"
    assert await svc.services.store.list_accounts() == before
