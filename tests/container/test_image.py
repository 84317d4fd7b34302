"""The container image, built from the Dockerfile (on the tests' Debian base) and run with
podman against a real Valkey and PostgreSQL on the host's network: what the Dockerfile
promises (a base pinned by digest, an unprivileged numeric user, two writable folders),
then the image itself. It starts ``svc serve``: it serves a stream whose credits settle,
read-only as the user 10001, its HEALTHCHECK passes, and on SIGTERM the stream in flight
finishes, its usage reaches PostgreSQL and the container exits 0. A bad setting, an
unreachable Redis or an unwritable data folder stop it as they stop ``svc serve``
anywhere: exit status 2 and at most three lines, no traceback."""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import openai
import psycopg
import pytest

from tests.e2e.conftest import production_valkey
from tests.support import postgres
from tests.support.podman import BUILD_TIMEOUT_S, ROOT, health, podman
from tests.support.processes import free_port

# the first test to need an image builds it (minutes when nothing is cached)
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(BUILD_TIMEOUT_S)]

DOCKERFILE = (ROOT / "Dockerfile").read_text()
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
UID = "10001"
GRANT = 10_000
REPLY_TOKENS = 30  # with 100 ms a token, a stream lasts about 3 s
START_LIMIT_S = 60
LABEL = "svc-test=image"


def _stages() -> list[str]:
    return DOCKERFILE.split("\nFROM ")[1:]


def test_every_stage_starts_from_the_base_image_pinned_by_digest() -> None:
    (base,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE, flags=re.MULTILINE)
    assert DIGEST.search(base), base
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE, flags=re.MULTILINE)
    assert froms == ["${PYTHON_IMAGE}"] * 3


def test_the_image_runs_svc_serve_as_a_numeric_unprivileged_user_without_bytecode() -> None:
    runtime = _stages()[-1]
    (user,) = re.findall(r"^USER (\S+)$", runtime, flags=re.MULTILINE)
    assert user == f"{UID}:{UID}"
    assert f"--uid {UID}" in runtime
    assert "PYTHONDONTWRITEBYTECODE=1" in runtime
    assert "SVC_METRICS_DIR=/tmp/" in runtime  # the writable folders: /tmp and SVC_DATA_DIR
    assert "SVC_DATA_DIR=/var/lib/svc" in runtime
    assert 'ENTRYPOINT ["svc", "serve"]' in runtime


@dataclass
class Stores:
    redis_url: str
    database_url: str

    def env(self) -> dict[str, str]:
        return {
            "SVC_HOST": "127.0.0.1",  # the host's network: the tests stay on its loopback
            "SVC_REDIS_URL": self.redis_url,
            "SVC_DATABASE_URL": self.database_url,
            "SVC_KEY_PEPPER": secrets.token_urlsafe(32),
            "SVC_ADMIN_TOKEN": secrets.token_urlsafe(32),
        }


@pytest.fixture(scope="module")
def stores() -> Iterator[Stores]:
    """A Valkey as production runs it and a PostgreSQL database, on the host."""
    valkey = production_valkey()
    try:
        with postgres.server_url() as url, postgres.session_database(url) as database:
            yield Stores(valkey.connection_url, database)
    finally:
        valkey.stop()


def run_args(image: str, env: dict[str, str], *, data_volume: bool = True) -> list[str]:
    """``podman run``'s options and image: read-only, on the host's network, /tmp a tmpfs
    and the data folder a volume (the image's /var/lib/svc, owned by its user)."""
    args = ["--label", LABEL, "--network", "host", "--read-only", "--tmpfs", "/tmp"]
    if data_volume:
        args += ["--volume", "/var/lib/svc"]
    for name, value in env.items():
        args += ["--env", f"{name}={value}"]
    return [*args, image]


@dataclass
class Served:
    container: str
    root: str
    env: dict[str, str]
    started_in_s: float
    credits_used: list[int] = field(default_factory=list)

    def admin(self, method: str, path: str, body: object | None = None) -> httpx.Response:
        auth = {"authorization": f"Bearer {self.env['SVC_ADMIN_TOKEN']}"}
        return httpx.request(
            method, f"{self.root}/admin/v1{path}", json=body, headers=auth, timeout=30
        )


@pytest.fixture(scope="module")
def served(svc_image: str, stores: Stores) -> Iterator[Served]:
    """The image serving on a free port of the host, once /readyz answers 200."""
    port = free_port()
    env = {
        **stores.env(),
        "SVC_PORT": str(port),
        "SVC_SIM_DELAY_MS": "100",
        "SVC_SIM_REPLY_TOKENS": str(REPLY_TOKENS),
    }
    began = time.monotonic()
    container = podman("run", "--detach", *run_args(svc_image, env), check=True).stdout.strip()
    root = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if httpx.get(f"{root}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() - began < START_LIMIT_S, podman("logs", container).stderr
            time.sleep(0.2)
        started_in_s = time.monotonic() - began
        print(f"\nsvc image: ready {started_in_s:.1f} s after podman run")
        yield Served(container, root, env, started_in_s)
    finally:
        podman("rm", "--force", "--volumes", container)


def test_the_image_is_small_and_starts_quickly(svc_image: str, served: Served) -> None:
    size = int(podman("image", "inspect", "--format", "{{.Size}}", svc_image).stdout)
    print(f"\nsvc image: {size / 1e6:.0f} MB")
    assert size < 400e6
    assert served.started_in_s < 30


def test_it_runs_as_10001_on_a_read_only_root_and_its_healthcheck_passes(served: Served) -> None:
    assert podman("exec", served.container, "id", "-u").stdout.strip() == UID
    assert podman("exec", served.container, "touch", "/opt/svc/written").returncode != 0
    assert podman("exec", served.container, "touch", "/var/lib/svc/written").returncode == 0
    checked = podman("healthcheck", "run", served.container)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert health(served.container) == "healthy"


def _stream(client: openai.OpenAI, chunks: list[object], first: threading.Event) -> None:
    stream = client.chat.completions.create(
        model="svc-fast", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    for chunk in stream:
        chunks.append(chunk)
        first.set()


@pytest.fixture(scope="module")
def account(served: Served) -> tuple[str, openai.OpenAI]:
    pid = served.admin("POST", "/accounts").json()["account_pid"]
    assert served.admin("POST", f"/accounts/{pid}/grants", {"credits": GRANT}).is_success
    key = served.admin(
        "POST",
        f"/accounts/{pid}/api-keys",
        {"name": "image", "environment": "live", "daily_cap_credits": None},
    ).json()["key"]
    served.env["test key"] = key  # for the log check below
    return pid, openai.OpenAI(base_url=f"{served.root}/v1", api_key=key, max_retries=0)


def test_a_stream_is_served_and_its_credits_settle(
    served: Served, account: tuple[str, openai.OpenAI]
) -> None:
    pid, client = account
    chunks: list[object] = []
    _stream(client, chunks, threading.Event())
    svc = chunks[-1].model_extra["svc"]  # type: ignore[attr-defined]
    assert svc["credits_used"] >= 1
    served.credits_used.append(svc["credits_used"])
    balance = served.admin("GET", f"/accounts/{pid}/credits").json()["total_available"]
    assert balance == GRANT - svc["credits_used"] == svc["balance_remaining"]


def test_sigterm_lets_the_stream_finish_flushes_its_usage_and_exits_0(
    served: Served, stores: Stores, account: tuple[str, openai.OpenAI]
) -> None:
    pid, client = account
    chunks: list[object] = []
    first = threading.Event()
    streaming = threading.Thread(target=_stream, args=(client, chunks, first))
    streaming.start()
    assert first.wait(30)
    stopped = podman("stop", "--time", "60", served.container, timeout=90)  # SIGTERM
    streaming.join(30)
    assert stopped.returncode == 0, stopped.stderr
    content = [c.choices[0] for c in chunks if c.choices]  # type: ignore[attr-defined]
    assert sum(1 for choice in content if choice.delta.content) == REPLY_TOKENS
    assert content[-1].finish_reason == "stop"
    svc = chunks[-1].model_extra["svc"]  # type: ignore[attr-defined]
    served.credits_used.append(svc["credits_used"])
    assert svc["balance_remaining"] == GRANT - sum(served.credits_used)
    state = podman("inspect", "--format", "{{.State.ExitCode}}", served.container)
    assert state.stdout.strip() == "0"
    with psycopg.connect(stores.database_url) as conn:
        row = conn.execute(
            "SELECT sum(requests), sum(credits) FROM usage_daily WHERE account_pid = %s", (pid,)
        ).fetchone()
    assert row == (2, sum(served.credits_used))
    logs = podman("logs", served.container)
    for line in (logs.stdout + logs.stderr).splitlines():
        json.loads(line)  # JSON only, granian's lines too
    for secret in (served.env["SVC_ADMIN_TOKEN"], served.env["test key"]):
        assert secret not in logs.stdout + logs.stderr


@pytest.mark.parametrize(
    ("case", "named"),
    [("bad setting", "SVC_WORKERS"), ("redis unreachable", "redis"), ("data dir", "/var/lib/svc")],
)
def test_a_start_up_failure_is_at_most_three_lines_and_exit_status_2(
    svc_image: str, stores: Stores, case: str, named: str
) -> None:
    env = {**stores.env(), "SVC_PORT": str(free_port())}
    data_volume = True
    if case == "bad setting":
        env["SVC_WORKERS"] = "many"
    elif case == "redis unreachable":
        env["SVC_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    else:  # the data folder left on the read-only root, and SQLite asked to write there
        data_volume = False
        env["SVC_DATABASE_URL"] = "sqlite:////var/lib/svc/svc.db"
    # without a healthcheck: podman would say on stderr that it cannot schedule one
    args = run_args(svc_image, env, data_volume=data_volume)
    exited = podman("run", "--rm", "--no-healthcheck", *args, timeout=60)
    output = exited.stdout + exited.stderr
    assert exited.returncode == 2, output
    assert 1 <= len(exited.stderr.splitlines()) <= 3, output
    assert exited.stdout == ""
    assert "Traceback" not in output
    (failure,) = [line for line in exited.stderr.splitlines() if line.startswith("svc: cannot")]
    assert named.lower() in failure.lower(), output
