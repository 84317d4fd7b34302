"""``svc admin …`` prints one JSON object and works with or without a running server."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.ops.embedded import is_serving, socket_path
from app.store import open_store
from tests.e2e.conftest import ROOT, Server
from tests.support.postgres import session_database

pytestmark = pytest.mark.e2e


def svc_admin(env: dict[str, str], *args: str) -> tuple[int, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "app", "admin", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    lines = done.stdout.decode().strip().splitlines()
    assert len(lines) == 1, done.stdout + done.stderr
    return done.returncode, json.loads(lines[0])


def served_before(data_dir: Path) -> dict[str, str]:
    """The environment of admin commands on a data folder ``svc serve`` used before (it
    made the store: admin commands never do)."""

    async def migrate() -> None:
        store = open_store(f"sqlite:///{data_dir / 'svc.db'}")
        await store.migrate()
        await store.close()

    data_dir.mkdir(mode=0o700)
    asyncio.run(migrate())
    return {**os.environ, "SVC_DATA_DIR": str(data_dir)}


def svc_admin_refused(env: dict[str, str], *args: str) -> str:
    """Run an admin command that must stop before it starts: its one line on stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "app", "admin", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, b""), done
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("folder", ["missing", "empty", "no-schema"])
def test_admin_outside_its_data_folder_creates_no_store(tmp_path: Path, folder: str) -> None:
    """Issue 44 item 11: no "no accounts" from a new, empty store made on the spot."""
    data_dir = tmp_path / "data"
    if folder != "missing":
        data_dir.mkdir()
    if folder == "no-schema":
        (data_dir / "svc.db").touch()  # a file, but not svc's
    env = {**os.environ, "SVC_DATA_DIR": str(data_dir)}
    for args in (["accounts"], ["create-account"], ["reconcile"]):
        line = svc_admin_refused(env, *args)
        assert "SVC_DATA_DIR" in line, line
        assert "SVC_DATABASE_URL" in line, line
        assert str(data_dir / "svc.db") in line
    assert sorted(p.name for p in tmp_path.rglob("*")) == (
        [] if folder == "missing" else ["data"] + (["svc.db"] if folder == "no-schema" else [])
    )
    if folder == "no-schema":
        assert (data_dir / "svc.db").stat().st_size == 0


def test_admin_on_a_postgresql_database_without_svcs_schema(
    tmp_path: Path, postgres_server: str
) -> None:
    with session_database(postgres_server) as url:
        env = {**os.environ, "SVC_DATA_DIR": str(tmp_path / "data"), "SVC_DATABASE_URL": url}
        line = svc_admin_refused(env, "accounts")
        assert "PostgreSQL" in line, line
        assert "SVC_DATABASE_URL" in line, line
        assert url not in line  # it may hold a password
        assert not (tmp_path / "data").exists()


def test_admin_commands_without_a_server(tmp_path: Path) -> None:
    env = served_before(tmp_path / "data")
    code, out = svc_admin(env, "create-account")
    assert code == 0
    pid = str(out["account_pid"])
    assert pid.startswith("acct_")
    code, out = svc_admin(env, "grant", pid, "1234")
    assert (code, out["purchased_available"], out["total_available"]) == (0, 1234, 1234)
    assert out["earned_expires_at"] is None
    code, out = svc_admin(env, "grant", pid, "66")
    assert out["total_available"] == 1300
    code, out = svc_admin(
        env, "create-key", pid, "--name", "ci", "--environment", "test", "--daily-cap", "500"
    )
    assert code == 0
    assert str(out["key"]).startswith("svc_test_")
    assert (out["object"], out["environment"], out["daily_cap_credits"]) == (
        "api_key",
        "test",
        500,
    )
    assert str(out["id"]).startswith("key_")
    assert out["role"] == "inference"  # least privilege unless asked (issue 44, item 8)
    key_id = out["id"]
    code, out = svc_admin(env, "credits", pid)
    assert out["total_available"] == 1300
    code, out = svc_admin(env, "inspect", pid)
    assert code == 0
    assert (out["account_pid"], out["purchased"], out["open_reservations"]) == (pid, 1300, [])
    assert out["keys"] == [
        {
            "id": key_id,
            "environment": "test",
            "status": "active",
            "daily_cap_credits": 500,
            "cap_used_today": 0,
            "expires_at": None,
            "allowed_models": None,
            "rate_limit_rpm": None,
            "max_credits_per_request": None,
            "last_used_at": None,
            "replaces": None,
        }
    ]
    code, out = svc_admin(env, "update-key", pid, str(key_id), "--daily-cap", "none")
    assert (code, out["name"], out["daily_cap_credits"]) == (0, "ci", None)
    code, out = svc_admin(env, "update-key", pid, str(key_id), "--name", "nightly")
    assert (code, out["name"], out["daily_cap_credits"]) == (0, "nightly", None)
    code, out = svc_admin(
        env, "update-key", pid, str(key_id), "--expires-at", "2030-01-01T00:00:00Z"
    )
    assert (code, out["expires_at"]) == (0, "2030-01-01T00:00:00Z")
    code, out = svc_admin(env, "inspect", pid)
    assert out["keys"][0]["daily_cap_credits"] is None  # type: ignore[index]
    assert out["keys"][0]["expires_at"] == 1_893_456_000  # type: ignore[index]
    code, out = svc_admin(env, "update-key", pid, str(key_id), "--name", "")
    assert code != 0
    assert out["error"]["param"] == "name"  # type: ignore[index]
    code, out = svc_admin(
        env,
        "update-key",
        pid,
        str(key_id),
        "--allowed-models",
        "svc-fast,svc-code",
        "--rate-limit-rpm",
        "120",
        "--max-credits-per-request",
        "75",
    )
    assert (code, out["allowed_models"], out["rate_limit_rpm"]) == (
        0,
        ["svc-fast", "svc-code"],
        120,
    )
    assert out["max_credits_per_request"] == 75
    code, out = svc_admin(env, "update-key", pid, str(key_id), "--allowed-models", "gpt-4")
    assert (code, out["error"]["param"]) == (1, "allowed_models")  # type: ignore[index]
    code, out = svc_admin(env, "update-key", pid, str(key_id), "--rate-limit-rpm", "0")
    assert (code, out["error"]["param"]) == (1, "rate_limit_rpm")  # type: ignore[index]
    code, out = svc_admin(env, "rotate-key", pid, str(key_id), "--grace-seconds", "600")
    assert code == 0
    assert (out["replaces"], out["name"], out["rate_limit_rpm"]) == (key_id, "nightly", 120)
    assert out["allowed_models"] == ["svc-fast", "svc-code"]
    assert out["max_credits_per_request"] == 75  # a successor keeps the ceiling
    assert out["expires_at"] == "2030-01-01T00:00:00Z"  # and the expiry (issue 44, item 10)
    assert str(out["key"]).startswith("svc_test_")
    code, out = svc_admin(env, "rotate-key", pid, str(key_id))
    assert (code, out["error"]["code"]) == (1, "api_key_not_rotatable")  # type: ignore[index]
    code, out = svc_admin(env, "inspect", pid)
    shown = {k["id"]: k for k in out["keys"]}  # type: ignore[attr-defined]
    assert shown[key_id]["expires_at"] <= int(time.time()) + 600
    assert [k["replaces"] for k in out["keys"]] == [key_id, None]  # type: ignore[attr-defined]
    # the command stopped the Valkey it started; the data (AOF) outlived it
    assert not is_serving(socket_path(tmp_path / "data"))
    code, out = svc_admin(env, "credits", pid)
    assert out["total_available"] == 1300
    code, out = svc_admin(env, "create-key", pid, "--name", "ops", "--role", "admin")
    assert (code, out["role"]) == (0, "admin")
    code, out = svc_admin(env, "update-key", pid, str(out["id"]), "--role", "inference")
    assert (code, out["role"]) == (0, "inference")


def test_admin_accounts_with_the_app_s_own_id(tmp_path: Path) -> None:
    """Issue 45 item 5: ``create-account --external-id``, and the id wherever an account is
    shown (``accounts``, ``account``, ``inspect``)."""
    env = served_before(tmp_path / "data")
    code, out = svc_admin(env, "create-account", "--external-id", "user-42@example.com")
    assert code == 0, out
    pid = str(out["account_pid"])
    code, plain = svc_admin(env, "create-account")
    assert code == 0, plain
    code, out = svc_admin(env, "accounts", "--external-id", "user-42@example.com")
    assert (code, [(a["id"], a["external_id"]) for a in out["data"]]) == (  # type: ignore[attr-defined]
        0,
        [(pid, "user-42@example.com")],
    )
    code, out = svc_admin(env, "accounts")
    shown = {a["id"]: a["external_id"] for a in out["data"]}  # type: ignore[attr-defined]
    assert shown == {pid: "user-42@example.com", plain["account_pid"]: None}
    code, out = svc_admin(env, "account", pid)
    assert (code, out["external_id"]) == (0, "user-42@example.com")
    code, out = svc_admin(env, "inspect", pid)
    assert (code, out["account_pid"], out["external_id"]) == (0, pid, "user-42@example.com")
    code, out = svc_admin(env, "create-account", "--external-id", "user-42@example.com")
    assert (code, out["error"]["code"]) == (1, "external_id_taken")  # type: ignore[index]
    code, out = svc_admin(env, "create-account", "--external-id", "two words")
    assert (code, out["error"]["param"]) == (1, "external_id")  # type: ignore[index]
    code, out = svc_admin(env, "accounts", "--external-id", "x" * 129)
    assert (code, out["error"]["param"]) == (1, "external_id")  # type: ignore[index]
    code, out = svc_admin(env, "accounts")
    assert len(out["data"]) == 2  # type: ignore[arg-type]  # the refused ones made nothing


def test_admin_errors_are_json(tmp_path: Path) -> None:
    env = served_before(tmp_path / "data")
    code, out = svc_admin(env, "grant", "acct_nope", "5")
    assert code == 1
    assert out["error"]["code"] == "account_not_found"  # type: ignore[index]
    code, out = svc_admin(env, "create-account")
    code, out = svc_admin(env, "grant", str(out["account_pid"]), "0")
    assert code == 1
    assert out["error"]["param"] == "credits"  # type: ignore[index]


def test_admin_commands_next_to_a_running_server(server: Server) -> None:
    _, out = svc_admin(server.env, "create-account")
    pid = str(out["account_pid"])
    svc_admin(server.env, "grant", pid, "5000")
    _code, out = svc_admin(server.env, "create-key", pid, "--name", "cli")
    key = str(out["key"])
    r = httpx.get(f"{server.base_url}/credits", headers={"authorization": f"Bearer {key}"})
    assert r.json()["total_available"] == 5000
    assert is_serving(socket_path(server.data_dir))  # the server's Valkey is still up


def test_dev_key_admin_token_database_and_valkey_data_are_private(server: Server) -> None:
    for name in ("dev-key.txt", "admin-token.txt", "key-pepper.txt", "svc.db", "svc.db-wal"):
        mode = stat.S_IMODE((server.data_dir / name).stat().st_mode)
        assert mode == 0o600, name
    # the embedded Valkey's AOF holds key digests and balances: its folder is closed
    for folder in (server.data_dir, server.data_dir / "valkey"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert server.dev_key.startswith("svc_live_")
    r = httpx.get(
        f"{server.base_url}/credits", headers={"authorization": f"Bearer {server.dev_key}"}
    )
    assert r.json()["total_available"] > 0
    # the one key a new deployment starts with manages the others (issue 44, item 8)
    listed = httpx.get(
        f"{server.base_url}/api-keys", headers={"authorization": f"Bearer {server.dev_key}"}
    ).json()["data"]
    assert [k["role"] for k in listed if k["name"] == "dev"] == ["admin"]
