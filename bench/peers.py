"""Other gateways measured in the same run, against the same mock (``--peer NAME``).

A peer runs only when its package is installed (``pip install 'litellm[proxy]'``); the
bench says so and goes on without it otherwise.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
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
KNOWN_PEERS = ("litellm",)


def available(name: str) -> bool:
    """True when the peer can be started here."""
    return name == "litellm" and importlib.util.find_spec("litellm") is not None


@contextlib.contextmanager
def running_peer(
    name: str, work: Path, mock: MockProcess, models: list[str], workers: int, port: int
) -> Iterator[str]:
    """Start the peer pointed at the mock; yields its base URL (ending in /v1)."""
    if name != "litellm":
        raise ValueError(f"unknown peer {name!r}; known: {', '.join(KNOWN_PEERS)}")
    config = work / "litellm.yaml"
    config.write_text(
        LITELLM_CONFIG.format(
            models="".join(LITELLM_MODEL.format(name=m, base_url=mock.base_url) for m in models)
        )
    )
    cli = Path(sys.executable).parent / "litellm"
    log = (work / "litellm.log").open("wb")
    process = subprocess.Popen(
        [str(cli), "--config", str(config), "--port", str(port), "--num_workers", str(workers)],
        env={**os.environ, "LITELLM_LOG": "ERROR"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError("litellm exited; see " + str(work / "litellm.log"))
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/health/liveliness", timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        else:
            raise RuntimeError("litellm did not become ready")
        yield f"{base}/v1"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 15)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
