"""After a full run with keys created, used and revoked: no key secret, no pepper and no
admin token anywhere in the server's logs, in any Redis key or value (or its AOF files), or
in the SQLite database's bytes."""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx
import openai
import pytest
import redis as redis_sync

from tests.faults.conftest import Stack, start_stack

pytestmark = [pytest.mark.e2e, pytest.mark.faults]


def redis_dump(r: redis_sync.Redis) -> bytes:
    """Every key and every value, whatever its type."""
    out: list[bytes] = []
    for name in r.scan_iter(count=1000):
        out.append(name)
        kind = r.type(name).decode()
        if kind == "string":
            out.append(r.get(name) or b"")
        elif kind == "hash":
            for k, v in r.hgetall(name).items():
                out += [k, v]
        elif kind == "zset":
            out += [m for m, _ in r.zrange(name, 0, -1, withscores=True)]
        elif kind == "set":
            out += list(r.smembers(name))
        elif kind == "list":
            out += list(r.lrange(name, 0, -1))
        elif kind == "stream":
            for entry_id, fields in r.xrange(name):
                out.append(entry_id)
                for k, v in fields.items():
                    out += [k, v]
        else:
            raise AssertionError(f"unexpected Redis type {kind} of {name!r}")
    return b"\n".join(out)


def _files(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_no_secret_in_logs_redis_or_the_database(
    tmp_path: Path, stack_factory: list[Stack]
) -> None:
    admin_token, pepper = "adm-" + secrets.token_urlsafe(24), "pep-" + secrets.token_urlsafe(24)
    stack = start_stack(
        tmp_path,
        env={
            "SVC_ADMIN_TOKEN": admin_token,
            "SVC_KEY_PEPPER": pepper,
            "SVC_DEV_BOOTSTRAP": "false",
            "SVC_FLUSH_INTERVAL_S": "0.2",
        },
    )
    stack_factory.append(stack)
    srv = stack.srv
    pid = srv.new_account(1_000_000)
    issued = [
        srv.new_key(pid, role="admin"),  # it makes, rotates and revokes keys below
        srv.new_key(pid, daily_cap=50),
        srv.new_key(pid, environment="test"),
    ]
    api = f"{srv.base_url}/api-keys"
    manager = {"authorization": f"Bearer {issued[0]}"}
    created = []
    for name in ("ci", "laptop", "old"):
        body = {"name": name, "environment": "live", "daily_cap_credits": None}
        r = httpx.post(api, json=body, headers=manager)
        assert r.status_code == 201, r.text
        created.append(r.json())
    issued += [c["key"] for c in created]
    revoked = [created[2], created[1]]
    for item in revoked:
        assert httpx.delete(f"{api}/{item['id']}", headers=manager).status_code == 200
    for key in issued:
        client = openai.OpenAI(base_url=srv.base_url, api_key=key, max_retries=0)
        if key in (c["key"] for c in revoked):
            with pytest.raises(openai.AuthenticationError):
                client.chat.completions.create(
                    model="svc-fast", messages=[{"role": "user", "content": "hi"}]
                )
        else:
            stream = client.chat.completions.create(
                model="svc-fast",
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=5,
                stream=True,
            )
            assert list(stream)
        client.close()
    # a wrong admin token and a broken key reach the error paths too
    assert httpx.get(f"{srv.root_url}/admin/v1/usage-lag", headers=manager).status_code == 401
    bad = issued[0][:-3] + "zzz"
    assert (
        httpx.get(f"{srv.base_url}/credits", headers={"authorization": f"Bearer {bad}"}).status_code
        == 401
    )
    assert httpx.get(api, headers=manager).status_code == 200
    stack.stop()  # SIGTERM: the final flush writes the usage rollups

    wanted = {"admin token": admin_token, "pepper": pepper}
    for i, key in enumerate(issued):
        wanted[f"key {i}"] = key
        wanted[f"key {i} random part"] = key[21:53]  # the id (public) is before it
    places = {
        "server log": (tmp_path / "server.log").read_bytes(),
        "redis keys and values": redis_dump(stack.redis()),
        "redis files (AOF)": _files(stack.valkey.data_dir),
        "database": _files(srv.data_dir),
    }
    assert len(places["database"]) > 0
    assert len(places["redis keys and values"]) > 0
    leaks = [
        (what, where)
        for what, secret in wanted.items()
        for where, data in places.items()
        if secret.encode() in data
    ]
    assert leaks == []
