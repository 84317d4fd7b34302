"""The deployment kit in deploy/ holds together without a container engine: compose.yaml
parses and starts each service only after the ones it needs are healthy, holds no secret,
sets only variables svc knows, and agrees with the nginx and Prometheus files on which
instances there are; the nginx site streams (its directives; tests/e2e/test_balancer.py
runs it for real) and the models file loads."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML, pinned in requirements/test.lock

from app.completion.catalog import load_catalog
from app.core.settings import ENV_PREFIX, HEARTBEATS_PER_DEADLINE, Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SETTINGS = {ENV_PREFIX + field.name.upper() for field in msgspec.structs.fields(Settings)}
SECRET_NAME = re.compile(r"TOKEN|PEPPER|PASSWORD|SECRET|_KEY$")
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")
SVC_PORT = 8000  # the image's SVC_PORT


def _compose() -> dict[str, Any]:
    loaded = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def _services() -> dict[str, dict[str, Any]]:
    return dict(_compose()["services"])


def _instances() -> dict[str, dict[str, Any]]:
    """The svc services: those built from the repository's Dockerfile."""
    return {name: s for name, s in _services().items() if "build" in s}


def _strings(value: object) -> list[str]:
    """Every string of a parsed YAML document, keys and values."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return [value] if isinstance(value, str) else []


def _env_example() -> dict[str, str]:
    pairs = {}
    for line in (DEPLOY / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            pairs[name.strip()] = value.strip()
    return pairs


def _nginx_directives(path: Path) -> list[tuple[tuple[str, ...], str, list[str]]]:
    """Every directive of an nginx file as (enclosing blocks, name, arguments)."""
    text = re.sub(r"#[^\n]*", "", path.read_text())
    tokens = re.findall(r'"[^"]*"|\'[^\']*\'|[{};]|[^\s{};]+', text)
    found: list[tuple[tuple[str, ...], str, list[str]]] = []
    blocks: list[str] = []
    words: list[str] = []
    for token in tokens:
        if token == ";":
            found.append((tuple(blocks), words[0], words[1:]))
            words = []
        elif token == "{":
            blocks.append(" ".join(words))
            words = []
        elif token == "}":
            blocks.pop()
        else:
            words.append(token)
    assert not blocks, f"{path}: a block is not closed"
    assert not words, f"{path}: the last directive has no ';'"
    return found


def _site() -> dict[str, list[str]]:
    """The directives of svc.conf's proxying location, by name."""
    directives = _nginx_directives(DEPLOY / "nginx" / "svc.conf")
    return {name: args for blocks, name, args in directives if blocks == ("server", "location /")}


def _seconds(value: str) -> int:
    match = re.fullmatch(r"(\d+)(s|m)?", value)
    assert match, value
    return int(match.group(1)) * (60 if match.group(2) == "m" else 1)


def test_each_service_has_a_healthcheck_and_waits_for_healthy_ones() -> None:
    services = _services()
    assert {"valkey", "postgres", "balancer", "prometheus"} <= set(services)
    assert len(_instances()) >= 2
    for name, service in services.items():
        assert "healthcheck" in service, f"{name} has no healthcheck"
        assert service.get("restart") == "unless-stopped", name
        needs = service.get("depends_on", {})
        assert isinstance(needs, dict), f"{name}: depends_on without conditions"
        for other, condition in needs.items():
            assert condition == {"condition": "service_healthy"}, (name, other)
            assert "healthcheck" in services[other], (name, other)
    for instance in _instances().values():
        assert set(instance["depends_on"]) == {"valkey", "postgres"}
    assert set(services["balancer"]["depends_on"]) == set(_instances())


def test_healthchecks_probe_readiness_and_the_stores() -> None:
    services = _services()
    for instance in _instances().values():
        assert f"http://127.0.0.1:{SVC_PORT}/readyz" in " ".join(instance["healthcheck"]["test"])
    assert "valkey-cli ping" in " ".join(services["valkey"]["healthcheck"]["test"])
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"]


def test_valkey_keeps_every_write_and_evicts_nothing() -> None:
    command = " ".join(_services()["valkey"]["command"])
    assert "--appendonly yes" in command
    assert "--maxmemory-policy noeviction" in command


def test_no_secret_is_written_in_the_kit() -> None:
    example = _env_example()
    for name, value in example.items():
        if SECRET_NAME.search(name):
            assert value == "", f".env.example gives {name} a value"
    for name, service in _services().items():
        for key, value in (service.get("environment") or {}).items():
            value = str(value)
            if SECRET_NAME.search(key):
                match = REFERENCE.fullmatch(value)
                assert match, f"{name}: {key} is not taken from deploy/.env"
                # required, unless it is a provider key (without it only test keys serve)
                assert match.group(2) == ":?" or key.endswith("_API_KEY"), (name, key)
            if "://" in value and "@" in value:  # credentials in a URL
                credentials = value.split("://", 1)[1].split("@", 1)[0]
                password = credentials.partition(":")[2]
                assert REFERENCE.fullmatch(password), f"{name}: {key} holds a password"


def test_every_variable_is_in_the_env_example_and_every_svc_name_is_a_setting() -> None:
    referenced = {m.group(1) for text in _strings(_compose()) for m in REFERENCE.finditer(text)}
    secrets = {s["environment"] for s in _compose()["secrets"].values()}
    assert referenced | secrets == set(_env_example())
    names = set(_env_example())
    for service in _services().values():
        names |= set(service.get("environment") or {})
    svc_names = {name for name in names if name.startswith(ENV_PREFIX)}
    assert svc_names <= SETTINGS, svc_names - SETTINGS


def test_the_instances_share_their_settings_and_trust_only_the_balancer() -> None:
    instances = list(_instances().values())
    first = instances[0]
    for instance in instances[1:]:
        assert instance == first
    env = first["environment"]
    shared = ("SVC_REDIS_URL", "SVC_DATABASE_URL", "SVC_KEY_PEPPER", "SVC_ADMIN_TOKEN")
    assert all(name in env for name in (*shared, "SVC_METRICS_TOKEN", "SVC_MODELS_FILE"))
    assert env["SVC_DATABASE_URL"].startswith("postgresql://")
    assert "SVC_DATA_DIR" not in env  # the image's, in the tmpfs
    networks = _compose()["networks"]
    (edge,) = networks["edge"]["ipam"]["config"]
    balancer = ipaddress.ip_address(_services()["balancer"]["networks"]["edge"]["ipv4_address"])
    assert balancer in ipaddress.ip_network(edge["subnet"])
    assert balancer not in ipaddress.ip_network(edge["ip_range"])  # never handed out
    trusted = [ipaddress.ip_network(n) for n in env["SVC_TRUSTED_PROXIES"].split(",")]
    assert any(balancer in network for network in trusted)
    for instance in instances:
        assert "edge" in instance["networks"]
        assert "ports" not in instance  # reached through the balancer only


def test_the_instances_outlive_their_grace_period_and_write_only_their_tmpfs() -> None:
    for instance in _instances().values():
        assert _seconds(instance["stop_grace_period"]) > Settings().shutdown_grace_s
        assert instance["read_only"] is True
        assert (ROOT / instance["build"]["context"].replace("..", ".") / "Dockerfile").exists()


def test_mounted_files_exist() -> None:
    for name, service in _services().items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), (name, source)


def test_the_models_file_loads_and_its_provider_keys_reach_the_instances() -> None:
    catalog = load_catalog(
        DEPLOY / "models.toml", reservation_deadline_s=Settings().reservation_deadline_s
    )
    env = next(iter(_instances().values()))["environment"]
    for provider in catalog.providers.values():
        assert provider.api_key_env in env
    for instance in _instances().values():
        assert "./models.toml:/etc/svc/models.toml:ro" in instance["volumes"]


def test_nginx_streams_sse_to_the_instances() -> None:
    site = _site()
    assert site["proxy_pass"] == ["http://svc"]
    assert site["proxy_buffering"] == ["off"]
    assert site["proxy_cache"] == ["off"]
    assert site["gzip"] == ["off"]
    assert site["proxy_http_version"] == ["1.1"]
    directives = _nginx_directives(DEPLOY / "nginx" / "svc.conf")
    headers = {
        args[0].lower(): args[1]
        for blocks, name, args in directives
        if blocks == ("server", "location /") and name == "proxy_set_header"
    }
    assert headers["connection"] == '""'  # keep-alive to the instances
    assert headers["x-forwarded-for"] == "$proxy_add_x_forwarded_for"
    assert headers["x-forwarded-proto"] == "$scheme"
    # no read or write between two chunks may be cut before svc's own provider timeouts
    longest = Settings().reservation_deadline_s / HEARTBEATS_PER_DEADLINE
    assert _seconds(site["proxy_read_timeout"][0]) > longest
    assert _seconds(site["proxy_send_timeout"][0]) > longest
    upstream = {name: args for blocks, name, args in directives if blocks == ("upstream svc",)}
    assert upstream["include"] == ["svc-upstreams.conf"]
    assert int(upstream["keepalive"][0]) > 0
    server = {name: args for blocks, name, args in directives if blocks == ("server",)}
    assert server["listen"] == ["80"]  # the test moves it; compose publishes it
    body_limit = server["client_max_body_size"][0]
    assert int(body_limit.rstrip("m")) * 1024 * 1024 > Settings().max_body_bytes


def test_nginx_prometheus_and_compose_name_the_same_instances() -> None:
    targets = {f"{name}:{SVC_PORT}" for name in _instances()}
    servers = {
        args[0]
        for _, name, args in _nginx_directives(DEPLOY / "nginx" / "svc-upstreams.conf")
        if name == "server"
    }
    assert servers == targets
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    (static,) = job["static_configs"]
    assert set(static["targets"]) == targets


def test_prometheus_scrapes_with_the_metrics_token_and_loads_the_rules() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert "rules/*.yml" in config["rule_files"]
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    prometheus = _services()["prometheus"]
    (secret,) = prometheus["secrets"]
    assert _compose()["secrets"][secret["source"]] == {"environment": "SVC_METRICS_TOKEN"}
    assert job["authorization"] == {
        "type": "Bearer",
        "credentials_file": f"/run/secrets/{secret['target']}",
    }
    assert "./prometheus:/etc/prometheus:ro" in prometheus["volumes"]


@pytest.mark.parametrize("name", ["compose.yaml", "nginx/svc.conf", "prometheus/prometheus.yml"])
def test_each_file_says_what_it_is(name: str) -> None:
    assert (DEPLOY / name).read_text().startswith("#")


def test_the_readme_says_how_to_run_the_kit_with_docker_or_podman() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Several instances", 1)[1].split("\n## ", 1)[0]
    assert "docker compose -f deploy/compose.yaml up" in section
    assert "podman-compose -f deploy/compose.yaml up" in section
