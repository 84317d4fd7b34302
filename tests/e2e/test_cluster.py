"""A real ``svc serve`` (two workers) on a real 3-primary Valkey Cluster: every script, the
flusher and ``svc admin`` work there unchanged, with one account on each primary."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from redis.cluster import RedisCluster

from app.credits.scripts import load_script_sources
from app.kv.layout import KeySpace
from app.spotlights.signed import SIGNATURE_HEADER, sign
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin
from tests.support.valkey_cluster import ValkeyCluster

pytestmark = pytest.mark.e2e
KEYS = KeySpace("svc", 64)
MSG = [{"role": "user", "content": "Say hello in five words."}]
SPOTLIGHT_SECRET = b"cluster-verifier-secret"


@pytest.fixture(scope="module")
def cluster_server(
    valkey_cluster: ValkeyCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    env = {
        "SVC_REDIS_URL": valkey_cluster.url,
        "SVC_REDIS_CLUSTER": "true",
        "SVC_DEV_BOOTSTRAP": "true",
        "SVC_FLUSH_INTERVAL_S": "0.2",
        "SVC_SPOTLIGHT_SECRETS": SPOTLIGHT_SECRET.decode(),
    }
    srv = start_server(tmp_path_factory.mktemp("svc-cluster"), workers=2, extra_env=env)
    try:
        yield srv
    finally:
        stop_server(srv.process)


@pytest.fixture
def cluster(valkey_cluster: ValkeyCluster) -> Iterator[RedisCluster]:
    client = RedisCluster.from_url(valkey_cluster.url)
    try:
        yield client
    finally:
        client.close()


def _one_account_per_primary(server: Server, cluster: RedisCluster) -> list[str]:
    """New accounts (random ids) until each primary holds one; the others are left idle."""
    found: dict[str, str] = {}
    for _ in range(60):
        pid = server.new_account(100_000)
        node = cluster.get_node_from_key(KEYS.account(KEYS.shard(pid), pid))
        found.setdefault(node.name, pid)
        if len(found) == len(cluster.get_primaries()):
            return list(found.values())
    raise AssertionError(f"accounts landed on {sorted(found)} only")


def _paid_stream(client: openai.OpenAI) -> int:
    chunks = list(client.chat.completions.create(model="svc-fast", messages=MSG, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return int(chunks[-1].model_extra["svc"]["credits_used"])  # type: ignore[index]


def _usage(client: openai.OpenAI) -> tuple[int, int]:
    body = client.get("/usage", cast_to=httpx.Response).json()
    return body["credits_spent"], body["requests_count"]


def _pending(cluster: RedisCluster) -> int:
    return sum(int(cluster.xlen(KEYS.events(shard))) for shard in range(KEYS.shards))


def _durable_usage(server: Server) -> dict[str, tuple[int, int]]:
    """Credits and requests per account in the SQLite rollups."""
    with sqlite3.connect(server.data_dir / "svc.db") as db:
        rows = db.execute(
            "SELECT account_pid, SUM(credits), SUM(requests) FROM usage_daily GROUP BY 1"
        ).fetchall()
    return {pid: (int(credits), int(requests)) for pid, credits, requests in rows}


def _ready(server: Server) -> httpx.Response:
    return httpx.get(f"{server.root_url}/readyz", timeout=10)


def test_every_operation_on_every_primary(cluster_server: Server, cluster: RedisCluster) -> None:
    server = cluster_server
    assert _ready(server).json()["checks"] == {"redis": True, "scripts": True, "store": True}
    spent: dict[str, int] = {}
    for pid in _one_account_per_primary(server, cluster):
        owner = openai.OpenAI(
            base_url=server.base_url, api_key=server.new_key(pid, role="admin"), max_retries=0
        )
        used = _paid_stream(owner)
        assert server.balance(pid) == 100_000 - used
        credits = owner.get("/credits", cast_to=httpx.Response).json()
        assert credits["total_available"] == 100_000 - used
        # a key made and revoked through the API, used in between
        created = owner.post(
            "/api-keys",
            body={"name": "ci", "environment": "live", "daily_cap_credits": 10_000},
            cast_to=httpx.Response,
        ).json()
        extra = openai.OpenAI(base_url=server.base_url, api_key=created["key"], max_retries=0)
        used += _paid_stream(extra)
        assert owner.delete(f"/api-keys/{created['id']}", cast_to=httpx.Response).is_success
        with pytest.raises(openai.AuthenticationError) as refused:
            _paid_stream(extra)
        assert refused.value.code == "api_key_revoked"
        assert _usage(owner) == (used, 2)
        assert server.balance(pid) == 100_000 - used
        spent[pid] = used

    # every primary forgets the scripts: the next calls load them again where they run
    shas = [hashlib.sha1(src.encode()).hexdigest() for src in load_script_sources().values()]
    assert cluster.script_flush()  # SCRIPT FLUSH on every primary
    for node in cluster.get_primaries():
        assert not any(cluster.execute_command("SCRIPT EXISTS", *shas, target_nodes=node))
    for pid, used in spent.items():
        owner = openai.OpenAI(base_url=server.base_url, api_key=server.new_key(pid), max_retries=0)
        spent[pid] = used + _paid_stream(owner)
        assert _usage(owner) == (spent[pid], 3)
        assert server.balance(pid) == 100_000 - spent[pid]
    assert _ready(server).status_code == 200
    for node in cluster.get_primaries():
        assert all(cluster.execute_command("SCRIPT EXISTS", *shas, target_nodes=node))

    # the workers' flushers drain every shard's usage stream into the durable store
    deadline = time.monotonic() + 60
    while _pending(cluster) and time.monotonic() < deadline:
        time.sleep(0.2)
    code, out = svc_admin(server.env, "usage-lag")
    assert (code, out["pending_events"]) == (0, 0)
    rows = _durable_usage(server)
    assert {pid: rows.get(pid) for pid in spent} == {pid: (used, 3) for pid, used in spent.items()}
    # svc admin inspect reads one account straight from its primary
    pid = next(iter(spent))
    code, out = svc_admin(server.env, "inspect", pid)
    assert code == 0
    assert out["purchased"] == 100_000 - spent[pid]
    assert sorted(k["status"] for k in out["keys"]) == ["active", "active", "revoked"]  # type: ignore[attr-defined]
    assert out["open_reservations"] == []
    # usage by key is exact on every primary, and every request has its activity row
    for pid, used in spent.items():
        owner = openai.OpenAI(base_url=server.base_url, api_key=server.new_key(pid), max_retries=0)
        day = owner.get("/usage?days=1&group_by=key", cast_to=httpx.Response).json()["daily"][0]
        assert len(day["groups"]) == 3  # the three keys that made a request
        assert sum(g["credits_spent"] for g in day["groups"]) == day["credits_spent"] == used
        activity = owner.get("/activity", cast_to=httpx.Response).json()["data"]
        assert (len(activity), sum(r["credits_used"] for r in activity)) == (3, used)


def test_key_settings_rotation_and_idempotency_on_every_primary(
    cluster_server: Server, cluster: RedisCluster
) -> None:
    """The scripts' new keys (the rate log, the lineage's cap, the idempotency record) live
    in each account's slot: allowed models, a rate limit, a rotation sharing the cap, and a
    replayed completion work on every primary."""
    server = cluster_server
    for pid in _one_account_per_primary(server, cluster):
        manager = openai.OpenAI(
            base_url=server.base_url, api_key=server.new_key(pid, role="admin"), max_retries=0
        )
        created = manager.post(
            "/api-keys",
            body={
                "name": "scoped",
                "environment": "live",
                "daily_cap_credits": 10_000,
                "allowed_models": ["svc-fast"],
                "rate_limit_rpm": 3,
            },
            cast_to=httpx.Response,
        ).json()
        scoped = openai.OpenAI(base_url=server.base_url, api_key=created["key"], max_retries=0)
        with pytest.raises(openai.PermissionDeniedError):
            scoped.chat.completions.create(model="svc-code", messages=MSG, stream=True)
        before = server.balance(pid)
        replayed = [
            scoped.chat.completions.with_raw_response.create(
                model="svc-fast",
                messages=MSG,
                stream=True,
                extra_headers={"Idempotency-Key": "once"},
            ).http_response.read()
            for _ in range(3)
        ]
        assert replayed[0] == replayed[1] == replayed[2]
        used = before - server.balance(pid)
        assert used > 0
        # the rotated key shares the rate limit: 1 start so far, 2 more in this minute
        rotated = manager.post(
            f"/api-keys/{created['id']}/rotate",
            body={"grace_seconds": 60},
            cast_to=httpx.Response,
        ).json()
        successor = openai.OpenAI(base_url=server.base_url, api_key=rotated["key"], max_retries=0)
        _paid_stream(successor)
        _paid_stream(scoped)
        with pytest.raises(openai.RateLimitError):
            _paid_stream(successor)
        code, out = svc_admin(server.env, "inspect", pid)
        assert code == 0
        shown = {k["id"]: k for k in out["keys"]}  # type: ignore[attr-defined]
        assert shown[rotated["id"]]["replaces"] == created["id"]
        assert shown[rotated["id"]]["cap_used_today"] == shown[created["id"]]["cap_used_today"]
        # one cap counter for the two keys: all they spent today
        assert shown[rotated["id"]]["cap_used_today"] == before - server.balance(pid)


def test_verified_spotlights_on_every_primary(
    cluster_server: Server, cluster: RedisCluster
) -> None:
    """The grant script's keys (the grant marker, the intent marker, the day's count) live in
    each account's slot: a signed view delivered three times rewards once on every primary,
    and a second view with the used intent is refused."""
    server = cluster_server
    for pid in _one_account_per_primary(server, cluster):
        auth = {"authorization": f"Bearer {server.new_key(pid)}"}
        earned_before = httpx.get(f"{server.base_url}/credits", headers=auth).json()
        intent = httpx.post(f"{server.base_url}/spotlights/intents", headers=auth).json()["token"]
        answers = []
        for view_id in ("view-1", "view-1", "view-1", "view-2"):
            body = json.dumps({"intent": intent, "view_id": view_id}).encode()
            headers = {SIGNATURE_HEADER: sign(SPOTLIGHT_SECRET, int(time.time()), body)}
            answers.append(
                httpx.post(f"{server.base_url}/spotlights/verified", content=body, headers=headers)
            )
        assert [a.status_code for a in answers] == [200, 200, 200, 400]
        assert [a.json().get("rewarded") for a in answers[:3]] == [True, False, False]
        earned = httpx.get(f"{server.base_url}/credits", headers=auth).json()
        assert earned["earned_available"] == earned_before["earned_available"] + 5_000
        listed = httpx.get(f"{server.base_url}/spotlights/rewards", headers=auth).json()
        assert [r["id"] for r in listed["data"]] == [f"signed:{pid}:view-1"]
