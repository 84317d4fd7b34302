"""The operators' audit log on a real server (issue 45 item 4): each admin route that
changes money, a key or an account's status writes one entry (its request's id, the client
address a trusted proxy forwarded), a refused one none; pages and the account filter; and
``svc admin``'s actions, audited as the CLI's and listed by ``svc admin audit``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin

pytestmark = pytest.mark.e2e
CLIENT = "198.51.100.23"  # what the trusted proxy (this host) says the client is


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    extra = {"SVC_TRUSTED_PROXIES": "127.0.0.1/32", "SVC_DEV_BOOTSTRAP": "false"}
    server = start_server(tmp_path_factory.mktemp("audit"), extra_env=extra)
    try:
        yield server
    finally:
        stop_server(server.process)


def _admin(srv: Server, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(
        method,
        f"{srv.root_url}/admin/v1{path}",
        json=body,
        headers={"authorization": f"Bearer {srv.admin_token}", "x-forwarded-for": CLIENT},
        timeout=30,
    )


def _log(srv: Server, query: str) -> list[dict[str, Any]]:
    page = _admin(srv, "GET", f"/audit{query}")
    assert page.status_code == 200, page.text
    data: list[dict[str, Any]] = page.json()["data"]
    return data


def test_each_admin_action_is_audited_once_and_a_refused_one_not(srv: Server) -> None:
    made = _admin(srv, "POST", "/accounts")
    pid = made.json()["account_pid"]
    grant = _admin(srv, "POST", f"/accounts/{pid}/grants", {"credits": 50, "reason": "PO-7"})
    body = {"name": "k", "environment": "live", "daily_cap_credits": None}
    key = _admin(srv, "POST", f"/accounts/{pid}/api-keys", body)
    key_id = key.json()["id"]
    update = _admin(srv, "PATCH", f"/accounts/{pid}/api-keys/{key_id}", {"name": "k2"})
    rotate = _admin(srv, "POST", f"/accounts/{pid}/api-keys/{key_id}/rotate", {})
    revoke = _admin(srv, "DELETE", f"/accounts/{pid}/api-keys/{rotate.json()['id']}")
    disable = _admin(srv, "PATCH", f"/accounts/{pid}", {"status": "disabled"})
    done = [made, grant, key, update, rotate, revoke, disable]
    assert [r.status_code for r in done] == [201, 200, 201, 200, 201, 200, 200]
    # refused: a bad reason, an unknown key, a rotation of a key rotated before
    assert (
        _admin(srv, "POST", f"/accounts/{pid}/grants", {"credits": 1, "reason": 1}).status_code
        == 400
    )
    assert (
        _admin(srv, "PATCH", f"/accounts/{pid}/api-keys/key_nope", {"name": "x"}).status_code == 404
    )
    assert _admin(srv, "POST", f"/accounts/{pid}/api-keys/{key_id}/rotate", {}).status_code == 409
    entries = _log(srv, f"?account={pid}")
    assert [e["action"] for e in entries] == [
        "account.disable",
        "key.revoke",
        "key.rotate",
        "key.update",
        "key.create",
        "credits.grant",
        "account.create",
    ]
    for entry, response in zip(entries, done[::-1], strict=True):
        assert entry["request_id"] == response.headers["x-request-id"]
        assert entry["client_address"] == CLIENT
        assert entry["actor"] == "admin_api"
    assert entries[5]["details"] == {"credits": 50, "pool": "purchased", "reason": "PO-7"}
    assert entries[3]["details"] == {"name": "k2"}
    assert entries[3]["target"] == key_id
    # pages of one, newest first, end where the list ends
    first = _admin(srv, "GET", f"/audit?account={pid}&limit=1").json()
    assert (first["data"][0]["id"], first["has_more"]) == (entries[0]["id"], True)
    last = _admin(srv, "GET", f"/audit?account={pid}&limit=5&after={entries[1]['id']}").json()
    assert ([e["id"] for e in last["data"]], last["has_more"]) == (
        [e["id"] for e in entries[2:7]],
        False,
    )
    bad = _admin(srv, "GET", "/audit?limit=0")
    assert (bad.status_code, bad.json()["error"]["param"]) == (400, "limit")


def test_svc_admin_actions_are_audited_as_the_cli_s(srv: Server) -> None:
    code, made = svc_admin(srv.env, "create-account")
    assert code == 0
    pid = str(made["account_pid"])
    code, _ = svc_admin(srv.env, "grant", pid, "25", "--reason", "refund #9")
    assert code == 0
    code, key = svc_admin(srv.env, "create-key", pid, "--name", "cli")
    assert code == 0
    code, _ = svc_admin(srv.env, "grant", pid, "0")
    assert code == 1
    code, out = svc_admin(srv.env, "audit", "--account", pid, "--limit", "10")
    assert code == 0, out
    data: list[dict[str, Any]] = out["data"]  # type: ignore[assignment]
    assert [(e["action"], e["actor"]) for e in data] == [
        ("key.create", "cli"),
        ("credits.grant", "cli"),
        ("account.create", "cli"),
    ]
    assert {(e["request_id"], e["client_address"]) for e in data} == {(None, None)}
    assert data[0]["target"] == key["id"]
    assert data[1]["details"] == {"credits": 25, "pool": "purchased", "reason": "refund #9"}
    assert str(key["key"]) not in str(out)
    # the API lists the CLI's entries too
    assert [e["id"] for e in _log(srv, f"?account={pid}")] == [e["id"] for e in data]
    code, out = svc_admin(srv.env, "audit", "--limit", "0")
    assert (code, out["error"]["param"]) == (1, "limit")  # type: ignore[index]
