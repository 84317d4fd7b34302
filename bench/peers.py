"""Other gateways measured in the same run, against the same mock (``--peer NAME``).

- ``litellm``: runs only when its package is installed (``pip install 'litellm[proxy]'``);
  the bench says so and goes on without it otherwise.
- ``portkey``: the Portkey gateway (Node), installed by the bench itself into
  ``bench/portkey/node_modules`` from the committed ``package.json`` and lock file (``npm
  ci``, once; later runs reuse it). Needs ``node`` and ``npm``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.mock_upstream import MockProcess

LITELLM_CONFIG = """\
model_list:
{models}
litellm_settings:
  drop_params: true
  telemetry: false
"""
LITELLM_MODEL = """\
  - model_name: {name}
    litellm_params:
      model: openai/{name}
      api_base: {base_url}
      api_key: mock-key
"""
KNOWN_PEERS = ("litellm", "portkey")
PORTKEY_DIR = Path(__file__).resolve().parent / "portkey"
PORTKEY_SERVER = PORTKEY_DIR / "node_modules/@portkey-ai/gateway/build/start-server.js"
# The gateway ships its own @hono/node-server (1.19.x), with which every streaming request
# fails inside the gateway ("TypeError: immutable"); moved aside, the 1.13.5 pinned next to
# it in package.json is used instead.
PORTKEY_NESTED = PORTKEY_DIR / "node_modules/@portkey-ai/gateway/node_modules/@hono/node-server"


@dataclass
class RunningPeer:
    base_url: str  # ends in /v1
    pid: int  # the root of its process tree
    headers: dict[str, str] = field(default_factory=dict)  # on every request


def available(name: str) -> bool:
    """True when the peer can be started here (saying why not otherwise)."""
    if name == "litellm":
        ok = importlib.util.find_spec("litellm") is not None
        if not ok:
            print("peer litellm skipped: pip install 'litellm[proxy]'", file=sys.stderr)
        return ok
    if name == "portkey":
        ok = shutil.which("node") is not None and (
            PORTKEY_SERVER.exists() or shutil.which("npm") is not None
        )
        if not ok:
            print("peer portkey skipped: needs node and npm", file=sys.stderr)
        return ok
    raise ValueError(f"unknown peer {name!r}; known: {', '.join(KNOWN_PEERS)}")


def install_portkey() -> None:
    """``npm ci`` into bench/portkey once, then the nested @hono/node-server moved aside."""
    if not PORTKEY_SERVER.exists():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=PORTKEY_DIR,
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=600,
        )
    if PORTKEY_NESTED.exists():
        PORTKEY_NESTED.rename(PORTKEY_NESTED.with_name("node-server.unused"))


@contextlib.contextmanager
def running_peer(
    name: str, work: Path, mock: MockProcess, models: list[str], workers: int, port: int
) -> Iterator[RunningPeer]:
    """Start the peer pointed at the mock, on 127.0.0.1 only."""
    if name == "litellm":
        config = work / "litellm.yaml"
        config.write_text(
            LITELLM_CONFIG.format(
                models="".join(LITELLM_MODEL.format(name=m, base_url=mock.base_url) for m in models)
            )
        )
        cli = Path(sys.executable).parent / "litellm"
        command = [
            str(cli),
            *("--config", str(config), "--host", "127.0.0.1", "--port", str(port)),
            *("--num_workers", str(workers)),
        ]
        env = {**os.environ, "LITELLM_LOG": "ERROR"}
        ready, headers = "/health/liveliness", {}
    elif name == "portkey":
        install_portkey()
        command = ["node", str(PORTKEY_SERVER), f"--port={port}", "--headless"]
        env = {**os.environ, "NODE_ENV": "production"}
        ready = "/"
        headers = {"x-portkey-provider": "openai", "x-portkey-custom-host": mock.base_url}
    else:
        raise ValueError(f"unknown peer {name!r}; known: {', '.join(KNOWN_PEERS)}")
    log_path = work / f"{name}.log"
    process = subprocess.Popen(
        command,
        cwd=PORTKEY_DIR if name == "portkey" else None,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited; see {log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + ready, timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"{name} did not become ready")
        yield RunningPeer(f"{base}/v1", process.pid, headers)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 15)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
