"""API keys end to end: lifecycle, secrets at rest, isolation, revocation under load,
daily caps, test keys and the cold path."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import UTC, datetime

import httpx
import openai
import pytest
import redis as redis_sync

from app.core.clock import parse_iso_utc
from app.keys.format import digest
from app.keys.refusals import CAP_RESETS_HEADER
from app.ops.embedded import redis_url, socket_path
from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e
MSG = [{"role": "user", "content": "hi"}]
# A key as a list (or an update) shows it: never the secret, never a hash.
KEY_ITEM_FIELDS = {
    "id",
    "object",
    "name",
    "environment",
    "daily_cap_credits",
    "created_at",
    "last4",
    "status",
    "expires_at",
    "last_used_at",
    "allowed_models",
    "rate_limit_rpm",
    "max_credits_per_request",
    "replaces",
    "role",
    "used_today_credits",
}
# The create answer: the secret, shown this once, and no state yet.
KEY_CREATED_FIELDS = KEY_ITEM_FIELDS - {
    "last4",
    "status",
    "last_used_at",
    "used_today_credits",
} | {"key"}


def _h(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _redis(server: Server) -> redis_sync.Redis:
    return redis_sync.Redis.from_url(redis_url(socket_path(server.data_dir)))


def _chat(server: Server, key: str, **extra: object) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": "svc-fast", "messages": MSG, **extra},
        headers=_h(key),
        timeout=30,
    )


def test_lifecycle_through_the_sdk_and_raw_http(server: Server) -> None:
    pid = server.new_account(10_000)
    admin_key = server.new_key(pid, role="admin")
    client = openai.OpenAI(base_url=server.base_url, api_key=admin_key, max_retries=0)
    created = client.post(
        "/api-keys",
        body={"name": "ci runner", "environment": "live", "daily_cap_credits": 500},
        cast_to=httpx.Response,
    )
    assert created.status_code == 201
    body = created.json()
    secret = body["key"]
    assert secret.startswith("svc_live_")
    assert set(body) == KEY_CREATED_FIELDS
    assert (body["object"], body["name"], body["daily_cap_credits"]) == (
        "api_key",
        "ci runner",
        500,
    )
    assert _chat(server, secret).status_code == 200

    listed = httpx.get(f"{server.base_url}/api-keys", headers=_h(secret))
    assert listed.status_code == 200
    data = listed.json()
    assert data["object"] == "list"
    assert [k["id"] for k in data["data"]][:2] == [body["id"], data["data"][1]["id"]]
    item = data["data"][0]
    assert set(item) == KEY_ITEM_FIELDS
    assert (item["last4"], item["status"]) == (secret[-4:], "active")
    assert secret not in listed.text
    assert admin_key not in listed.text

    # the secret is nowhere at rest: not in the database file, not in any Redis key or value
    for path in server.data_dir.rglob("*"):
        if path.is_file() and path.name not in ("dev-key.txt",):
            assert secret.encode() not in path.read_bytes(), path
    r = _redis(server)
    for name in r.scan_iter(count=1000):
        assert secret.encode() not in name
        kind = r.type(name)
        if kind == b"string":
            assert secret.encode() not in (r.get(name) or b"")
        elif kind == b"hash":
            assert all(secret.encode() not in v for v in r.hgetall(name).values())

    deleted = httpx.delete(f"{server.base_url}/api-keys/{body['id']}", headers=_h(admin_key))
    assert deleted.status_code == 200
    assert deleted.json() == {"id": body["id"], "object": "api_key", "deleted": True}
    for method, path in [
        ("POST", "/chat/completions"),
        ("GET", "/models"),
        ("GET", "/credits"),
        ("GET", "/usage"),
        ("GET", "/api-keys"),
        ("DELETE", f"/api-keys/{body['id']}"),
    ]:
        resp = httpx.request(
            method,
            server.base_url + path,
            headers=_h(secret),
            json={"model": "svc-fast", "messages": MSG} if method == "POST" else None,
        )
        assert resp.status_code == 401, path
        assert resp.json()["error"]["code"] == "api_key_revoked"
    again = httpx.delete(f"{server.base_url}/api-keys/{body['id']}", headers=_h(admin_key))
    assert again.status_code == 200  # idempotent
    listed = httpx.get(f"{server.base_url}/api-keys", headers=_h(admin_key)).json()
    assert {k["id"]: k["status"] for k in listed["data"]}[body["id"]] == "revoked"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"name": "", "environment": "live", "daily_cap_credits": None}, "name"),
        ({"name": "x" * 101, "environment": "live", "daily_cap_credits": None}, "name"),
        ({"name": "a\\nb", "environment": "live", "daily_cap_credits": None}, "name"),
        ({"name": "ok", "environment": "prod", "daily_cap_credits": None}, "environment"),
        ({"name": "ok", "environment": "live", "daily_cap_credits": -1}, "daily_cap_credits"),
        ({"name": "ok", "environment": "live", "daily_cap_credits": 1.5}, "daily_cap_credits"),
        ({"name": "ok", "environment": "live"}, "daily_cap_credits"),
        ({"environment": "live", "daily_cap_credits": 3}, "name"),
    ],
)
def test_create_validation(server: Server, body: dict[str, object], param: str) -> None:
    pid = server.new_account(0)
    key = server.new_key(pid, role="admin")
    if body.get("name") == "a\\nb":
        body = {**body, "name": "a\nb"}
    r = httpx.post(f"{server.base_url}/api-keys", json=body, headers=_h(key))
    assert r.status_code == 400
    assert r.json()["error"]["param"] == param
    listed = httpx.get(f"{server.base_url}/api-keys", headers=_h(key)).json()
    assert len(listed["data"]) == 1


def test_test_keys_cannot_manage_keys(server: Server) -> None:
    pid = server.new_account(0)
    live = server.new_key(pid)
    test = server.new_key(pid, environment="test")
    body = {"name": "x", "environment": "live", "daily_cap_credits": None}
    r = httpx.post(f"{server.base_url}/api-keys", json=body, headers=_h(test))
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "test_key_forbidden"
    key_id = httpx.get(f"{server.base_url}/api-keys", headers=_h(live)).json()["data"][0]["id"]
    r = httpx.delete(f"{server.base_url}/api-keys/{key_id}", headers=_h(test))
    assert r.status_code == 403
    assert httpx.get(f"{server.base_url}/api-keys", headers=_h(test)).status_code == 200


def test_accounts_cannot_see_or_touch_each_others_keys(server: Server) -> None:
    a, b = server.new_account(100), server.new_account(100)
    key_a, key_b = server.new_key(a), server.new_key(b, role="admin")
    id_a = httpx.get(f"{server.base_url}/api-keys", headers=_h(key_a)).json()["data"][0]["id"]
    listed_b = httpx.get(f"{server.base_url}/api-keys", headers=_h(key_b)).text
    assert id_a not in listed_b
    foreign = httpx.delete(f"{server.base_url}/api-keys/{id_a}", headers=_h(key_b))
    unknown = httpx.delete(f"{server.base_url}/api-keys/key_AAAAAAAAAAAA", headers=_h(key_b))
    garbage = httpx.delete(f"{server.base_url}/api-keys/nonsense", headers=_h(key_b))
    for r in (foreign, unknown, garbage):
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "api_key_not_found"
    assert foreign.json()["error"]["message"].replace(id_a, "X") == unknown.json()["error"][
        "message"
    ].replace("key_AAAAAAAAAAAA", "X")
    assert _chat(server, key_a).status_code == 200


def test_revocation_under_load_on_two_workers(server: Server) -> None:
    pid = server.new_account(10_000_000)
    manager = server.new_key(pid, role="admin")
    victim = server.new_key(pid)
    key_id = httpx.get(f"{server.base_url}/api-keys", headers=_h(victim)).json()["data"][0]["id"]
    revoked_at: list[float] = []
    late_successes: list[float] = []
    stop = threading.Event()

    async def hammer() -> None:
        async with httpx.AsyncClient(timeout=30) as client:

            async def loop() -> None:
                while not stop.is_set():
                    started = time.monotonic()
                    r = await client.post(
                        f"{server.base_url}/chat/completions",
                        json={"model": "svc-fast", "messages": MSG},
                        headers=_h(victim),
                    )
                    if r.status_code == 200 and revoked_at and started > revoked_at[0]:
                        late_successes.append(started)
                    if r.status_code == 401:
                        assert r.json()["error"]["code"] == "api_key_revoked"

            await asyncio.gather(*(loop() for _ in range(8)))

    thread = threading.Thread(target=lambda: asyncio.run(hammer()))
    thread.start()
    time.sleep(1.0)
    r = httpx.delete(f"{server.base_url}/api-keys/{key_id}", headers=_h(manager))
    revoked_at.append(time.monotonic())
    assert r.status_code == 200
    time.sleep(1.0)
    stop.set()
    thread.join(30)
    assert late_successes == []
    assert _chat(server, manager).status_code == 200


async def test_daily_cap_holds_under_concurrency(server: Server) -> None:
    pid = server.new_account(1_000_000)
    cap = 30
    key = server.new_key(pid, daily_cap=cap)
    start = server.balance(pid)

    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=50)) as client:

        async def one() -> httpx.Response:
            return await client.post(
                f"{server.base_url}/chat/completions",
                json={"model": "svc-fast", "messages": MSG, "max_tokens": 60},
                headers=_h(key),
            )

        results = await asyncio.gather(*(one() for _ in range(50)))
    ok = [r for r in results if r.status_code == 200]
    capped = [r for r in results if r.status_code == 429]
    assert len(ok) + len(capped) == 50
    assert ok
    assert capped
    used = sum(json.loads(r.text.split("\n\n")[-3][6:])["svc"]["credits_used"] for r in ok)
    assert used <= cap
    assert start - server.balance(pid) == used
    # refused while the others' holds were in flight: retry in seconds (or, once settled
    # spend leaves no room, at midnight)
    for err in capped:
        held = err.json()["error"]["code"] == "daily_cap_held"
        assert held or err.json()["error"]["code"] == "daily_cap_exceeded"
        assert err.headers["x-should-retry"] == ("true" if held else "false")
    # sequentially: requests are served until the next hold would exceed the cap (a hold
    # covers the prompt's bound, so it can be more than the charge it settles to)
    for _ in range(cap + 1):
        r = await asyncio.to_thread(_chat, server, key, max_tokens=60)
        if r.status_code != 200:
            break
        used += json.loads(r.text.split("\n\n")[-3][6:])["svc"]["credits_used"]
    assert r.status_code == 429
    assert used <= cap
    assert start - server.balance(pid) == used
    # nothing in flight now: the settled spend leaves no room until midnight
    assert r.json()["error"]["code"] == "daily_cap_exceeded"
    assert r.headers["x-should-retry"] == "false"
    # no retry-after (clients sleep on it for hours): the reset time, the next 00:00 UTC
    assert "retry-after" not in r.headers
    midnight = parse_iso_utc(r.headers[CAP_RESETS_HEADER])
    assert midnight is not None
    assert midnight % 86_400 == 0
    assert -5 <= midnight - time.time() <= 86_400


def test_test_keys_deduct_nothing_and_are_recorded_as_test(server: Server) -> None:
    pid = server.new_account(5_000)
    key = server.new_key(pid, environment="test", daily_cap=1000)
    reported = []
    for _ in range(3):
        r = _chat(server, key)
        meta = json.loads(r.text.split("\n\n")[-3][6:])["svc"]
        reported.append(meta["credits_used"])
        assert meta["balance_remaining"] == 5_000
    assert all(c >= 1 for c in reported)
    assert server.balance(pid) == 5_000
    r = _redis(server)
    usage = {k: v for k, v in r.hgetall(f"svc:{{s{_shard(pid)}}}:use:{pid}").items()}
    assert int(usage[b"test:credits"]) == sum(reported)
    assert int(usage[b"test:requests"]) == 3
    assert b"live:credits" not in usage


def _shard(pid: str) -> int:
    from app.kv.layout import shard_of

    return shard_of(pid, 64)


def test_cold_path_rewarms_a_lost_mapping(server: Server) -> None:
    pid = server.new_account(1000)
    key = server.new_key(pid)
    pepper = (server.data_dir / "key-pepper.txt").read_text().strip().encode()
    mapping = f"svc:kd:{digest(pepper, key)}"
    r = _redis(server)
    assert r.exists(mapping)
    r.delete(mapping)
    assert _chat(server, key).status_code == 200  # verified against the argon2id hash
    assert r.exists(mapping)


def _id_of(server: Server, manager: str, secret: str) -> str:
    """The id of the key ``secret`` in its account's list (``manager``: a key of it)."""
    listed = httpx.get(f"{server.base_url}/api-keys", headers=_h(manager)).json()["data"]
    return str(next(k["id"] for k in listed if k["last4"] == secret[-4:]))


def test_an_update_changes_name_and_cap_at_once_on_every_worker(server: Server) -> None:
    pid = server.new_account(1_000_000)
    manager = server.new_key(pid, role="admin")
    worker_key = server.new_key(pid, daily_cap=None)
    key_id = _id_of(server, manager, worker_key)
    for _ in range(4):  # spends some of today on both workers
        assert _chat(server, worker_key).status_code == 200
    r = httpx.patch(
        f"{server.base_url}/api-keys/{key_id}",
        json={"name": "renamed", "daily_cap_credits": 1},
        headers=_h(manager),
    )
    assert r.status_code == 200, r.text
    item = r.json()
    assert (item["id"], item["name"], item["daily_cap_credits"], item["status"]) == (
        key_id,
        "renamed",
        1,
        "active",
    )
    assert set(item) == KEY_ITEM_FIELDS
    # the cap is below what today already used: every request on every worker is refused
    # from the very next one, and nothing is charged for them
    before = server.balance(pid)
    refused = [_chat(server, worker_key) for _ in range(8)]
    assert {r.status_code for r in refused} == {429}
    assert {r.json()["error"]["code"] for r in refused} == {"daily_cap_exceeded"}
    assert server.balance(pid) == before
    # only the fields sent change: the name stays when the cap goes
    r = httpx.patch(
        f"{server.base_url}/api-keys/{key_id}",
        json={"daily_cap_credits": None},
        headers=_h(manager),
    )
    assert (r.json()["name"], r.json()["daily_cap_credits"]) == ("renamed", None)
    assert all(_chat(server, worker_key).status_code == 200 for _ in range(4))


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"environment": "test"}, "environment"),
        ({"name": "ok", "status": "active"}, "status"),
        ({"name": ""}, "name"),
        ({"name": "a\nb"}, "name"),
        ({"daily_cap_credits": -1}, "daily_cap_credits"),
        ({"daily_cap_credits": "10"}, "daily_cap_credits"),
    ],
)
def test_an_update_is_checked_and_a_bad_one_changes_nothing(
    server: Server, body: dict[str, object], param: str
) -> None:
    pid = server.new_account(0)
    key = server.new_key(pid, daily_cap=5, role="admin")
    key_id = httpx.get(f"{server.base_url}/api-keys", headers=_h(key)).json()["data"][0]["id"]
    r = httpx.patch(f"{server.base_url}/api-keys/{key_id}", json=body, headers=_h(key))
    assert r.status_code == 400
    assert r.json()["error"]["param"] == param
    (listed,) = httpx.get(f"{server.base_url}/api-keys", headers=_h(key)).json()["data"]
    assert (listed["name"], listed["daily_cap_credits"]) == ("test", 5)


def test_updates_are_the_accounts_own_and_live_keys_only(server: Server) -> None:
    a, b = server.new_account(100), server.new_account(100)
    key_a, key_b = server.new_key(a, role="admin"), server.new_key(b, role="admin")
    test_a = server.new_key(a, environment="test")
    id_a = _id_of(server, key_a, key_a)
    body = {"name": "mine"}
    foreign = httpx.patch(f"{server.base_url}/api-keys/{id_a}", json=body, headers=_h(key_b))
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (404, "api_key_not_found")
    by_test = httpx.patch(f"{server.base_url}/api-keys/{id_a}", json=body, headers=_h(test_a))
    assert (by_test.status_code, by_test.json()["error"]["code"]) == (403, "test_key_forbidden")
    # a revoked key can be renamed, and stays revoked
    victim = server.new_key(a)
    victim_id = _id_of(server, key_a, victim)
    assert httpx.delete(f"{server.base_url}/api-keys/{victim_id}", headers=_h(key_a)).is_success
    r = httpx.patch(f"{server.base_url}/api-keys/{victim_id}", json=body, headers=_h(key_a))
    assert (r.status_code, r.json()["status"], r.json()["name"]) == (200, "revoked", "mine")
    assert _chat(server, victim).json()["error"]["code"] == "api_key_revoked"
    admin = server.admin("PATCH", f"/accounts/{a}/api-keys/{id_a}", {"daily_cap_credits": 9})
    assert (admin.status_code, admin.json()["daily_cap_credits"]) == (200, 9)
    missing = server.admin("PATCH", f"/accounts/{b}/api-keys/{id_a}", {"daily_cap_credits": 9})
    assert missing.status_code == 404


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_key_stops_at_its_expiry_on_every_worker_and_route(server: Server) -> None:
    pid = server.new_account(100_000)
    manager = server.new_key(pid, role="admin")
    expires = time.time() + 3
    body = {
        "name": "short",
        "environment": "live",
        "daily_cap_credits": None,
        "expires_at": _iso(expires),
    }
    created = httpx.post(f"{server.base_url}/api-keys", json=body, headers=_h(manager)).json()
    assert created["expires_at"] == _iso(expires)
    short = created["key"]
    assert _chat(server, short).status_code == 200
    listed = {
        k["id"]: k
        for k in httpx.get(f"{server.base_url}/api-keys", headers=_h(manager)).json()["data"]
    }
    assert listed[created["id"]]["expires_at"] == _iso(expires)
    time.sleep(max(0.0, int(expires) + 1 - time.time()))
    before = server.balance(pid)
    for _ in range(6):  # both workers
        r = _chat(server, short)
        assert (r.status_code, r.json()["error"]["code"]) == (401, "api_key_expired")
        credits = httpx.get(f"{server.base_url}/credits", headers=_h(short))
        assert (credits.status_code, credits.json()["error"]["code"]) == (401, "api_key_expired")
    for path in ("/models", "/models/svc-fast", "/usage", "/api-keys"):
        r = httpx.get(f"{server.base_url}{path}", headers=_h(short))
        assert (r.status_code, r.json()["error"]["code"]) == (401, "api_key_expired"), path
    assert server.balance(pid) == before
    # lifting the expiry brings it back at once; setting one in the past ends it at once
    key_id = created["id"]
    r = httpx.patch(
        f"{server.base_url}/api-keys/{key_id}", json={"expires_at": None}, headers=_h(manager)
    )
    assert (r.status_code, r.json()["expires_at"]) == (200, None)
    assert all(_chat(server, short).status_code == 200 for _ in range(4))
    past = {"expires_at": "2026-01-01T00:00:00+00:00"}
    assert httpx.patch(
        f"{server.base_url}/api-keys/{key_id}", json=past, headers=_h(manager)
    ).is_success
    assert {_chat(server, short).status_code for _ in range(4)} == {401}


@pytest.mark.parametrize(
    "expires_at", ["2020-01-01T00:00:00Z", "tomorrow", "2030-01-01T00:00:00", 5, ""]
)
def test_a_key_needs_a_future_time_with_its_offset(server: Server, expires_at: object) -> None:
    pid = server.new_account(0)
    key = server.new_key(pid, role="admin")
    body = {"name": "k", "environment": "live", "daily_cap_credits": None, "expires_at": expires_at}
    r = httpx.post(f"{server.base_url}/api-keys", json=body, headers=_h(key))
    assert (r.status_code, r.json()["error"]["param"]) == (400, "expires_at")
    assert len(httpx.get(f"{server.base_url}/api-keys", headers=_h(key)).json()["data"]) == 1


def test_the_list_shows_when_each_key_was_last_used(server: Server) -> None:
    pid = server.new_account(100_000)
    manager = server.new_key(pid, role="admin")
    used = server.new_key(pid)
    idle = server.new_key(pid)
    started = int(time.time())
    assert _chat(server, used).status_code == 200
    listed = {
        k["last4"]: k
        for k in httpx.get(f"{server.base_url}/api-keys", headers=_h(manager)).json()["data"]
    }
    assert (listed[idle[-4:]]["last_used_at"], listed[idle[-4:]]["used_today_credits"]) == (None, 0)
    spent = httpx.get(f"{server.base_url}/usage?days=1", headers=_h(manager)).json()
    assert listed[used[-4:]]["used_today_credits"] == spent["credits_spent"] > 0
    last = datetime.strptime(listed[used[-4:]]["last_used_at"], "%Y-%m-%dT%H:%M:%SZ")
    assert started <= last.replace(tzinfo=UTC).timestamp() <= time.time()
    # a refused request is no use: a key over its cap keeps its last use
    key_id = _id_of(server, manager, used)
    httpx.patch(
        f"{server.base_url}/api-keys/{key_id}", json={"daily_cap_credits": 0}, headers=_h(manager)
    )
    time.sleep(1.1)
    assert _chat(server, used).status_code == 429
    again = httpx.patch(f"{server.base_url}/api-keys/{key_id}", json={}, headers=_h(manager)).json()
    assert again["last_used_at"] == listed[used[-4:]]["last_used_at"]
