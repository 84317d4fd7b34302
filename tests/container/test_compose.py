"""deploy/'s kit brought up with podman-compose, with tests/container/compose.standins.yaml
over it (the image built from the Dockerfile; Debian-built stand-ins for the third-party
images; Grafana left out by its profile), and down again.

Its services start in the order compose.yaml declares, each once the services it depends
on are healthy; a completion streams through nginx and settles; Prometheus scrapes both
instances and loads svc's rules; with one instance stopped the other serves everything.

podman-compose waits for ``condition: service_healthy`` only on podman 4.6 and later
(``podman wait --condition=healthy``); Debian 12's podman is 4.3. So the kit is started in
the stages its depends_on declares, each ``podman-compose up --no-deps`` of one stage
once every service of the stage before is healthy: the order Compose follows. The
healthchecks are the kit's own, run by the test (``wait_healthy``) where podman's systemd
timers cannot run them."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML, pinned in requirements/test.lock

from tests.support.podman import BUILD_TIMEOUT_S, ENV, ROOT, health, podman, wait_healthy
from tests.support.processes import free_port

# the first test to need an image builds it (minutes when nothing is cached)
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(BUILD_TIMEOUT_S)]

COMPOSE = ROOT / "deploy" / "compose.yaml"
OVERRIDE = ROOT / "tests" / "container" / "compose.standins.yaml"
PODMAN_COMPOSE = str(Path(sys.executable).parent / "podman-compose")  # the test venv's
HEALTHY_WITHIN_S = 120
PROJECT_PREFIX = "svc-test-"  # and the test session's process id
CONNECT_TIMEOUT_S = int(  # the balancer's, deploy/nginx/svc.conf
    re.findall(r"proxy_connect_timeout (\d+)s;", (ROOT / "deploy/nginx/svc.conf").read_text())[0]
)
RFC3339_NANO = '"2006-01-02T15:04:05.999999999Z07:00"'  # Go's layout
GRANT = 10_000


def _declared() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return dict(loaded["services"])


def _override() -> dict[str, Any]:
    """The override, its !reset and !override tags read as nothing (Compose's merge tags;
    what they replace is not needed here)."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    loaded = yaml.load(OVERRIDE.read_text(), Loader=Loader)
    assert isinstance(loaded, dict)
    return loaded


def _profiled() -> set[str]:
    """The services the override leaves to a profile."""
    return {name for name, service in _override()["services"].items() if service.get("profiles")}


def stages() -> list[list[str]]:
    """The kit's services (those without a profile) in the order depends_on declares: each
    stage's services depend only on earlier stages'."""
    needs = {
        name: set(service.get("depends_on") or {})
        for name, service in _declared().items()
        if name not in _profiled()
    }
    ordered: list[list[str]] = []
    placed: set[str] = set()
    while len(placed) < len(needs):
        stage = sorted(name for name in needs if name not in placed and needs[name] <= placed)
        assert stage, f"depends_on has a cycle among {set(needs) - placed}"
        ordered.append(stage)
        placed |= set(stage)
    return ordered


# What the override may change of a service: which image runs and how that image would run
# itself, where the instances' data and models file are, and Grafana's profile. Never a
# healthcheck, a dependency, a network, a port or the environment.
OVERRIDABLE = {"image", "user", "working_dir", "entrypoint", "command", "tmpfs", "volumes",
               "profiles"}  # fmt: skip


def test_the_override_changes_only_images_and_how_they_run() -> None:
    override = _override()
    declared = _declared()
    for name, service in override["services"].items():
        assert name in declared, name
        assert set(service) <= OVERRIDABLE, (name, set(service) - OVERRIDABLE)
        assert "command" not in declared[name] or "command" not in service, name
    assert set(override) == {"services", "secrets"}


@dataclass
class Kit:
    project: str
    env: dict[str, str]
    balancer: str
    prometheus: str
    started: list[list[str]]

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        command = [PODMAN_COMPOSE, "--project-name", self.project, "--file", str(COMPOSE),
                   "--file", str(OVERRIDE), *args]  # fmt: skip
        return subprocess.run(command, env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)  # fmt: skip

    def container(self, service: str) -> str:
        found = podman(
            "ps", "--all", "--quiet",
            f"--filter=label=io.podman.compose.project={self.project}",
            f"--filter=label=io.podman.compose.service={service}",
        ).stdout.split()  # fmt: skip
        assert len(found) == 1, (service, found)
        return found[0]

    def admin(self, method: str, path: str, body: object | None = None) -> httpx.Response:
        auth = {"authorization": f"Bearer {self.env['SVC_ADMIN_TOKEN']}"}
        return httpx.request(
            method, f"{self.balancer}/admin/v1{path}", json=body, headers=auth, timeout=30
        )


def _remove_abandoned_kits() -> None:
    """The containers, networks and volumes of a kit whose test session died before taking
    it down (podman-compose names each PROJECT_…): its networks would hold the kit's fixed
    subnet."""
    abandoned = re.compile(rf"{PROJECT_PREFIX}(\d+)_")
    for kind, name in (("container", "{{.Names}}"), ("network", "{{.Name}}"),
                       ("volume", "{{.Name}}")):  # fmt: skip
        every = ["--all"] if kind == "container" else []
        for item in podman(kind, "ls", *every, "--format", name).stdout.split():
            match = abandoned.match(item)
            if match and not _alive(int(match.group(1))):
                podman(kind, "rm", "--force", *(["--volumes"] if kind == "container" else []), item)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture(scope="module")
def kit(
    svc_image: str, standins_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Kit]:
    """The kit up, stage by stage, every service healthy; taken down with its volumes."""
    folder = tmp_path_factory.mktemp("kit")
    metrics_token = secrets.token_hex(32)
    token_file = folder / "metrics-token"
    token_file.write_text(metrics_token)
    token_file.chmod(0o644)  # Prometheus runs as its own user
    balancer_port, prometheus_port = free_port(), free_port()
    env = {
        **ENV,
        "SVC_TEST_IMAGE": svc_image,
        "SVC_TEST_STANDINS": standins_image,
        "SVC_TEST_METRICS_TOKEN_FILE": str(token_file),
        # deploy/.env's variables (.env.example), as an operator fills them in
        "SVC_KEY_PEPPER": secrets.token_hex(32),
        "SVC_ADMIN_TOKEN": secrets.token_hex(32),
        "SVC_METRICS_TOKEN": metrics_token,
        "POSTGRES_PASSWORD": secrets.token_hex(16),
        "OPENAI_API_KEY": "",
        "BALANCER_PUBLISH": f"127.0.0.1:{balancer_port}",
        "PROMETHEUS_PUBLISH": f"127.0.0.1:{prometheus_port}",
        "SVC_WORKERS": "1",
    }
    _remove_abandoned_kits()
    kit = Kit(
        project=f"{PROJECT_PREFIX}{os.getpid()}",
        env=env,
        balancer=f"http://127.0.0.1:{balancer_port}",
        prometheus=f"http://127.0.0.1:{prometheus_port}",
        started=[],
    )
    try:
        for stage in stages():
            up = kit.compose("up", "--detach", "--no-build", "--no-deps", *stage)
            assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
            kit.started.append(stage)
            wait_healthy([kit.container(service) for service in stage], HEALTHY_WITHIN_S)
        yield kit
    finally:
        down = kit.compose("down", "--volumes", "--timeout", "10")
        assert down.returncode == 0, down.stderr[-3000:]


def _first_healthy(container: str) -> datetime:
    """When the container's first passing healthcheck started."""
    passed = podman(
        "inspect", "--format",
        '{{range .State.Health.Log}}{{if eq .ExitCode 0}}{{.Start}}{{"\\n"}}{{end}}{{end}}',
        container,
    ).stdout.split("\n")  # fmt: skip
    return min(_timestamp(line) for line in passed if line.strip())


def _timestamp(text: str) -> datetime:
    """An RFC 3339 time with nanoseconds, as podman writes them, to the microsecond."""
    match = re.fullmatch(r"(.+T[\d:]+)(?:\.(\d+))?(Z|[+-][\d:]+)", text.strip())
    assert match, text
    whole, fraction, zone = match.groups()
    zone = "+00:00" if zone == "Z" else zone
    return datetime.fromisoformat(f"{whole}.{((fraction or '') + '000000')[:6]}{zone}")


def test_services_start_in_the_declared_order_each_once_its_dependencies_are_healthy(
    kit: Kit,
) -> None:
    assert kit.started == [["postgres", "prometheus", "valkey"], ["svc-1", "svc-2"], ["balancer"]]
    running = podman(
        "ps", "--format", "{{.Labels}}", f"--filter=label=io.podman.compose.project={kit.project}"
    ).stdout
    assert "grafana" not in running  # left to its profile
    for name, service in _declared().items():
        if name in _profiled():
            continue
        container = kit.container(name)
        assert health(container) == "healthy", name
        started = podman("inspect", "--format", f"{{{{.State.StartedAt.Format {RFC3339_NANO}}}}}",
                         container).stdout  # fmt: skip
        for dependency in service.get("depends_on") or {}:
            assert _first_healthy(kit.container(dependency)) < _timestamp(started), (
                name,
                dependency,
            )


def _new_key(kit: Kit) -> tuple[str, str]:
    pid = kit.admin("POST", "/accounts").json()["account_pid"]
    assert kit.admin("POST", f"/accounts/{pid}/grants", {"credits": GRANT}).is_success
    created = kit.admin(
        "POST",
        f"/accounts/{pid}/api-keys",
        {"name": "kit", "environment": "live", "daily_cap_credits": None},
    )
    assert created.status_code == 201, created.text
    return pid, created.json()["key"]


def _complete(kit: Kit, key: str) -> int:
    """One streamed completion through the balancer; the credits it used."""
    client = openai.OpenAI(base_url=f"{kit.balancer}/v1", api_key=key, max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="svc-fast", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert chunks[-2].choices[0].finish_reason == "stop"
    return int(chunks[-1].model_extra["svc"]["credits_used"])  # type: ignore[index]


def test_a_completion_streams_through_the_balancer_and_settles(kit: Kit) -> None:
    pid, key = _new_key(kit)
    used = _complete(kit, key)
    assert used >= 1
    balance = kit.admin("GET", f"/accounts/{pid}/credits").json()["total_available"]
    assert balance == GRANT - used


def test_prometheus_scrapes_both_instances_and_loads_svcs_rules(kit: Kit) -> None:
    deadline = time.monotonic() + 60
    while True:
        targets = httpx.get(f"{kit.prometheus}/api/v1/targets", timeout=10).json()
        health_by_target = {
            t["labels"]["instance"]: t["health"] for t in targets["data"]["activeTargets"]
        }
        if health_by_target == {"svc-1:8000": "up", "svc-2:8000": "up"}:
            break
        assert time.monotonic() < deadline, health_by_target
        time.sleep(2)
    rules = httpx.get(f"{kit.prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
    loaded = {group["name"] for group in rules}
    declared = set()
    for path in sorted((ROOT / "deploy" / "prometheus" / "rules").glob("*.yml")):
        declared |= {group["name"] for group in yaml.safe_load(path.read_text())["groups"]}
    assert loaded == declared


def test_with_one_instance_stopped_the_other_serves(kit: Kit) -> None:
    """Every request succeeds. nginx still tries the stopped instance, whose address is gone:
    such a try waits proxy_connect_timeout before the request goes to the other, until
    max_fails tries have marked it down for fail_timeout."""
    pid, key = _new_key(kit)
    stopped = podman("stop", "--time", "45", kit.container("svc-1"), timeout=90)
    assert stopped.returncode == 0, stopped.stderr
    exit_code = podman("inspect", "--format", "{{.State.ExitCode}}", kit.container("svc-1"))
    assert exit_code.stdout.strip() == "0"
    used = []
    for _ in range(3):
        began = time.monotonic()
        used.append(_complete(kit, key))
        assert time.monotonic() - began < CONNECT_TIMEOUT_S + 2
    for _ in range(5):
        began = time.monotonic()
        assert httpx.get(f"{kit.balancer}/readyz", timeout=30).status_code == 200
        assert time.monotonic() - began < CONNECT_TIMEOUT_S + 2
    balance = kit.admin("GET", f"/accounts/{pid}/credits").json()["total_available"]
    assert balance == GRANT - sum(used)
