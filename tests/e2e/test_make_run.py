"""`make run` for real, into a virtualenv of its own: it installs requirements/runtime.lock
and svc, nothing else, and serves a streamed completion from that alone (a module of app/
that imported a test-only package would fail here, not in the suites, whose .venv has
everything). Needs the package index, as `make test` does; pip's cache makes it quick after
`make test` has installed the same versions."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ROOT
from tests.support.processes import free_port, stop_process

pytestmark = pytest.mark.e2e

RUNTIME_LOCK = ROOT / "requirements" / "runtime.lock"
# What a virtualenv holds besides the lock: pip itself, setuptools on Python < 3.12, and svc.
BESIDES_THE_LOCK = {"pip", "setuptools", "svc"}


def _pinned() -> set[str]:
    names = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", RUNTIME_LOCK.read_text(), re.M)
    return {_canonical(name) for name in names}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _wait_until_served(process: subprocess.Popen[bytes], data: Path, root: str, log: Path) -> str:
    """The dev key, once `make run` has installed and svc answers with it."""
    deadline = time.monotonic() + 540
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail("make run exited:\n" + log.read_text()[-4000:])
        key_file = data / "dev-key.txt"
        if key_file.exists():
            key = key_file.read_text().strip()
            try:
                auth = {"authorization": f"Bearer {key}"}
                if httpx.get(f"{root}/v1/models", headers=auth).status_code == 200:
                    return key
            except httpx.TransportError:
                pass
        time.sleep(0.2)
    pytest.fail("make run did not serve in time:\n" + log.read_text()[-4000:])


@pytest.mark.timeout(600)
def test_make_run_serves_from_the_runtime_lock_alone(tmp_path: Path) -> None:
    venv, data, log = tmp_path / "venv", tmp_path / "data", tmp_path / "make-run.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env |= {
        "SVC_DATA_DIR": str(data),
        "SVC_PORT": str(port),
        "SVC_WORKERS": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["make", "--no-print-directory", "run", f"VENV={venv}", f"PYTHON={sys.executable}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    root = f"http://127.0.0.1:{port}"
    try:
        key = _wait_until_served(process, data, root, log)
        body = {"model": "svc-fast", "messages": [{"role": "user", "content": "Hello!"}]}
        with httpx.stream(
            "POST",
            f"{root}/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
        ) as response:
            assert response.status_code == 200
            events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    finally:
        stop_process(process)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text
    assert chunks[-1]["svc"]["credits_used"] >= 1

    # The virtualenv holds the runtime lock, svc and pip: no test layer, no test tool.
    assert (venv / "runtime.stamp").exists()
    assert not (venv / "test.stamp").exists()
    listed = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    installed = {_canonical(p["name"]) for p in json.loads(listed.stdout)}
    assert installed - BESIDES_THE_LOCK == _pinned()
    for tool in ("pytest", "ruff", "mypy", "coverage", "openai"):
        assert not (venv / "bin" / tool).exists(), tool
    helped = subprocess.run(
        [venv / "bin" / "svc", "--help"], capture_output=True, text=True, timeout=60
    )
    assert helped.returncode == 0, helped.stderr
    assert "serve" in helped.stdout
