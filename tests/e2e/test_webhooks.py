"""Webhooks against a real server and a real receiver (an HTTP server in this process):
signed deliveries, once per event, retried while the receiver fails, and kept across a
restart; URLs that would reach svc's own network refused."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as redis_sync

from app.kv.layout import KeySpace
from app.ops.embedded import redis_url, socket_path
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin
from tests.e2e.webhook_receiver import Receiver

pytestmark = pytest.mark.e2e
FAST_RETRIES = {
    "SVC_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
    "SVC_WEBHOOK_FIRST_RETRY_S": "0.5",
    "SVC_WEBHOOK_POLL_S": "0.2",
    "SVC_WEBHOOK_TIMEOUT_S": "2",
    "SVC_WEBHOOK_SCAN_S": "0.5",
    "SVC_EARNED_EXPIRY_DAYS": "1",  # earned credits expire within the 3 days' notice
}
KEYS = KeySpace("svc", 64)
TOLERANCE_S = 300  # the sample in docs/api.md refuses older signatures


def verify(secret: str, header: str, body: bytes, now: float) -> bool:
    """The check docs/api.md shows receivers."""
    fields = dict(part.split("=", 1) for part in header.split(","))
    timestamp = int(fields["t"])
    if abs(now - timestamp) > TOLERANCE_S:
        return False
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return hmac.compare_digest(expected.hexdigest(), fields["v1"])


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("hooks"), workers=2, extra_env=FAST_RETRIES)
    try:
        yield srv
    finally:
        stop_server(srv.process)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.http.shutdown()


def _owner(server: Server) -> tuple[str, dict[str, str]]:
    pid = server.new_account(100_000)
    return pid, {"authorization": f"Bearer {server.new_key(pid, role='admin')}"}


def _create(server: Server, headers: dict[str, str], url: str, events: list[str]) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/webhooks", json={"url": url, "events": events}, headers=headers
    )


def _wait(condition: Any, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_webhook_is_made_listed_changed_and_deleted(hooked: Server, receiver: Receiver) -> None:
    _, headers = _owner(hooked)
    made = _create(hooked, headers, receiver.url, ["key.revoked"])
    assert made.status_code == 201, made.text
    hook = made.json()
    assert hook["secret"].startswith("whsec_")
    assert (hook["object"], hook["events"], hook["url"]) == (
        "webhook",
        ["key.revoked"],
        receiver.url,
    )
    listed = httpx.get(f"{hooked.base_url}/webhooks", headers=headers).json()["data"]
    assert [h["id"] for h in listed] == [hook["id"]]
    assert "secret" not in listed[0]
    changed = httpx.patch(
        f"{hooked.base_url}/webhooks/{hook['id']}",
        json={"events": ["key.rotated", "key.revoked"], "description": "ops"},
        headers=headers,
    ).json()
    assert (changed["events"], changed["description"]) == (["key.revoked", "key.rotated"], "ops")
    # the account's low-balance threshold: set, shown on its webhooks, cleared
    url = f"{hooked.base_url}/webhooks/{hook['id']}"
    set_low = httpx.patch(url, json={"low_balance_credits": 100}, headers=headers).json()
    assert set_low["low_balance_credits"] == 100
    listed = httpx.get(f"{hooked.base_url}/webhooks", headers=headers).json()["data"]
    assert listed[0]["low_balance_credits"] == 100
    cleared = httpx.patch(url, json={"low_balance_credits": None}, headers=headers).json()
    assert cleared["low_balance_credits"] is None
    bad = httpx.patch(url, json={"low_balance_credits": -1}, headers=headers)
    assert (bad.status_code, bad.json()["error"]["param"]) == (400, "low_balance_credits")
    gone = httpx.delete(f"{hooked.base_url}/webhooks/{hook['id']}", headers=headers)
    assert gone.json() == {"id": hook["id"], "object": "webhook", "deleted": True}
    assert httpx.get(f"{hooked.base_url}/webhooks", headers=headers).json()["data"] == []
    again = httpx.delete(f"{hooked.base_url}/webhooks/{hook['id']}", headers=headers)
    assert (again.status_code, again.json()["error"]["code"]) == (404, "webhook_not_found")


@pytest.mark.parametrize(
    "url",
    [
        "https://10.1.2.3/hook",  # private
        "https://169.254.169.254/latest/meta-data",  # link-local (cloud metadata)
        "https://127.0.0.2/hook",  # loopback, not the allowed address
        "https://[::1]/hook",
        "https://[::ffff:10.0.0.1]/hook",  # IPv4-mapped private
        "https://100.64.0.1/hook",  # shared address space
        "https://0.0.0.0/hook",
        "http://example.com/hook",  # http to a host not allowed
        "ftp://127.0.0.1/hook",
        "https://user:pass@127.0.0.1/hook",
        "not a url",
    ],
)
def test_urls_into_svcs_own_network_are_refused(hooked: Server, url: str) -> None:
    _, headers = _owner(hooked)
    r = _create(hooked, headers, url, ["key.revoked"])
    assert (r.status_code, r.json()["error"]["param"]) == (400, "url"), r.text
    assert httpx.get(f"{hooked.base_url}/webhooks", headers=headers).json()["data"] == []


def test_bad_webhook_bodies_are_400s_naming_the_field(hooked: Server, receiver: Receiver) -> None:
    pid, headers = _owner(hooked)
    for body, param in [
        ({"url": receiver.url, "events": ["credits.gone"]}, "events"),
        ({"url": receiver.url, "events": []}, "events"),
        ({"url": receiver.url}, "events"),
        ({"url": receiver.url, "events": ["key.revoked"], "description": "a\nb"}, "description"),
        ({"url": receiver.url, "events": ["key.revoked"], "colour": "red"}, "colour"),
    ]:
        r = httpx.post(f"{hooked.base_url}/webhooks", json=body, headers=headers)
        assert (r.status_code, r.json()["error"]["param"]) == (400, param), (body, r.text)
    test_key = hooked.new_key(pid, environment="test")
    r = _create(hooked, {"authorization": f"Bearer {test_key}"}, receiver.url, ["key.revoked"])
    assert (r.status_code, r.json()["error"]["code"]) == (403, "test_key_forbidden")


def test_key_events_arrive_signed_once_each(hooked: Server, receiver: Receiver) -> None:
    pid, headers = _owner(hooked)
    hook = _create(hooked, headers, receiver.url, ["key.revoked", "key.rotated"]).json()
    keys = [
        hooked.admin(
            "POST",
            f"/accounts/{pid}/api-keys",
            {"name": f"k{i}", "environment": "live", "daily_cap_credits": None},
        ).json()
        for i in range(2)
    ]
    rotated = httpx.post(
        f"{hooked.base_url}/api-keys/{keys[0]['id']}/rotate",
        json={"grace_seconds": 60},
        headers=headers,
    ).json()
    for _ in range(3):  # a revoke retried: one event
        assert httpx.delete(
            f"{hooked.base_url}/api-keys/{keys[1]['id']}", headers=headers
        ).is_success
    _wait(lambda: len(receiver.unique()) == 2)
    time.sleep(1)  # nothing more comes
    assert len(receiver.events()) == 2
    by_type = {e["type"]: e for e in receiver.events()}
    assert by_type["key.rotated"]["data"]["key_id"] == keys[0]["id"]
    assert by_type["key.rotated"]["data"]["new_key_id"] == rotated["id"]
    assert by_type["key.revoked"]["data"]["key_id"] == keys[1]["id"]
    for head, body in receiver.received:
        assert head["content-type"] == "application/json"
        assert verify(hook["secret"], head["svc-signature"], body, time.time())
        assert not verify("whsec_wrong", head["svc-signature"], body, time.time())
    deliveries = httpx.get(
        f"{hooked.base_url}/webhooks/{hook['id']}/deliveries", headers=headers
    ).json()
    assert sorted(d["type"] for d in deliveries["data"]) == ["key.revoked", "key.rotated"]
    for d in deliveries["data"]:
        assert (d["status"], d["attempt"], d["status_code"], d["next_retry_at"]) == (
            "delivered",
            1,
            204,
            None,
        )
    # the operator sees the same, over HTTP and from the command line
    assert hooked.admin("GET", f"/accounts/{pid}/webhooks").json()["data"][0]["id"] == hook["id"]
    code, listed = svc_admin(hooked.env, "webhooks", pid)
    assert (code, [h["id"] for h in listed["data"]]) == (0, [hook["id"]])  # type: ignore[index]
    code, sent = svc_admin(hooked.env, "webhooks", pid, "--deliveries", hook["id"])
    assert (code, sent) == (0, deliveries)


def test_retries_follow_a_receiver_that_fails_then_recovers(
    hooked: Server, receiver: Receiver
) -> None:
    pid, headers = _owner(hooked)
    hook = _create(hooked, headers, receiver.url, ["key.revoked"]).json()
    receiver.failures = 2
    key = hooked.admin(
        "POST",
        f"/accounts/{pid}/api-keys",
        {"name": "k", "environment": "live", "daily_cap_credits": None},
    ).json()
    assert httpx.delete(f"{hooked.base_url}/api-keys/{key['id']}", headers=headers).is_success
    url = f"{hooked.base_url}/webhooks/{hook['id']}/deliveries"

    def delivered() -> bool:
        found = httpx.get(url, headers=headers).json()["data"]
        return bool(found) and found[0]["status"] == "delivered"

    _wait(delivered)
    (state,) = httpx.get(url, headers=headers).json()["data"]
    assert (state["attempt"], state["status_code"]) == (3, 204)
    bodies = [body for _, body in receiver.received]
    assert len(bodies) == 3
    assert len(set(bodies)) == 1  # the same event, byte for byte
    for head, body in receiver.received:
        assert verify(hook["secret"], head["svc-signature"], body, time.time())


def test_a_restart_in_the_middle_loses_no_event(tmp_path: Path, receiver: Receiver) -> None:
    srv = start_server(tmp_path, workers=2, extra_env=FAST_RETRIES)
    try:
        pid, headers = _owner(srv)
        _create(srv, headers, receiver.url, ["key.revoked"])
        receiver.failures = 1_000_000  # down
        ids = []
        for i in range(5):
            key = srv.admin(
                "POST",
                f"/accounts/{pid}/api-keys",
                {"name": f"k{i}", "environment": "live", "daily_cap_credits": None},
            ).json()
            assert httpx.delete(f"{srv.base_url}/api-keys/{key['id']}", headers=headers).is_success
            ids.append(key["id"])
        _wait(lambda: len(receiver.unique()) == 5)  # each tried at least once, refused
    finally:
        stop_server(srv.process)
    receiver.failures = 0  # back up while svc is down
    srv = start_server(tmp_path, workers=2, extra_env=FAST_RETRIES)
    try:
        before = len(receiver.received)
        # the retries carry on (a send cut by the shutdown waits out its lease)
        _wait(lambda: len(receiver.received[before:]) >= 5, seconds=60)
        time.sleep(1.5)
        kept = receiver.unique()
        assert sorted(e["data"]["key_id"] for e in kept.values()) == sorted(ids)
        after = [json.loads(b)["id"] for _, b in receiver.received[before:]]
        assert sorted(after) == sorted(kept)  # once each after the restart: all delivered
    finally:
        stop_server(srv.process)


def test_time_tells_of_keys_and_earned_credits_about_to_expire_once(
    hooked: Server, receiver: Receiver
) -> None:
    pid, headers = _owner(hooked)
    types = ["key.expiring", "credits.earned_expiring", "credits.earned_expired"]
    hook = _create(hooked, headers, receiver.url, types).json()
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3 * 86_400))
    body = {"name": "short", "environment": "live", "daily_cap_credits": None, "expires_at": soon}
    expiring = hooked.admin("POST", f"/accounts/{pid}/api-keys", body).json()
    later = {**body, "name": "long", "expires_at": "2099-01-01T00:00:00Z"}
    assert hooked.admin("POST", f"/accounts/{pid}/api-keys", later).status_code == 201
    reward = hooked.admin("POST", f"/accounts/{pid}/spotlights", {"view_id": "v-1"})
    assert reward.is_success, reward.text
    _wait(lambda: len(receiver.unique()) == 2)
    time.sleep(2)  # four scans more: nothing new
    assert len(receiver.events()) == 2
    by_type = {e["type"]: e["data"] for e in receiver.events()}
    assert by_type["key.expiring"]["key_id"] == expiring["id"]
    assert by_type["credits.earned_expiring"]["credits"] == reward.json()["credits"] > 0
    # a day later, nothing touched the account: the expiry is met by svc's own look
    shard = KEYS.shard(pid)
    account = redis_sync.Redis.from_url(redis_url(socket_path(hooked.data_dir)))
    account.hset(KEYS.account(shard, pid), "earned_exp", int(time.time()) - 1)
    _wait(lambda: len(receiver.unique()) == 3)
    time.sleep(2)
    assert len(receiver.events()) == 3
    expired = next(e["data"] for e in receiver.events() if e["type"] == "credits.earned_expired")
    assert expired["credits"] == reward.json()["credits"]
    assert account.hget(KEYS.account(shard, pid), "earned") == b"0"
    for head, raw in receiver.received:
        assert verify(hook["secret"], head["svc-signature"], raw, time.time())


def test_a_low_balance_and_a_keys_cap_are_told_once_per_crossing_under_load(
    hooked: Server, receiver: Receiver
) -> None:
    pid = hooked.new_account(400)
    created = hooked.admin(
        "POST",
        f"/accounts/{pid}/api-keys",
        {"name": "capped", "environment": "live", "daily_cap_credits": 200, "role": "admin"},
    ).json()
    headers = {"authorization": f"Bearer {created['key']}"}
    body = {
        "url": receiver.url,
        "events": ["credits.low", "key.cap_threshold"],
        "low_balance_credits": 300,
    }
    made = httpx.post(f"{hooked.base_url}/webhooks", json=body, headers=headers)
    assert made.status_code == 201, made.text
    assert made.json()["low_balance_credits"] == 300

    async def load() -> list[int]:
        """Waves of 20 concurrent completions until the key's cap refuses one."""
        codes: list[int] = []
        async with httpx.AsyncClient(timeout=60) as client:

            async def one() -> int:
                r = await client.post(
                    f"{hooked.base_url}/chat/completions",
                    json={"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]},
                    headers=headers,
                )
                return r.status_code

            for _ in range(50):
                codes += await asyncio.gather(*(one() for _ in range(20)))
                if 429 in codes:
                    break
        return codes

    codes = asyncio.run(load())
    assert 429 in codes  # the cap was reached: the load crossed every level it could
    _wait(lambda: {"credits.low", "key.cap_threshold"} <= {e["type"] for e in receiver.events()})
    time.sleep(2)  # retries, other workers, later scans: nothing more comes
    events = receiver.events()
    low = [e for e in events if e["type"] == "credits.low"]
    assert len(low) == 1
    assert low[0]["data"]["low_balance_credits"] == 300
    assert low[0]["data"]["balance"] < 300
    levels = sorted(e["data"]["percent"] for e in events if e["type"] == "key.cap_threshold")
    assert levels[:2] == [50, 80]
    assert levels in ([50, 80], [50, 80, 100])
    assert {e["data"]["key_id"] for e in events if e["type"] == "key.cap_threshold"} == {
        created["id"]
    }
    assert len({e["id"] for e in events}) == len(events)  # each sent once
