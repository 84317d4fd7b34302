"""A real Prometheus on a real svc (issue 34 items 3 and 4): Debian's ``prometheus`` binary
(tests/ensure-prometheus.sh installs it), started on a free port of 127.0.0.1 with
deploy/prometheus/prometheus.yml as it is but for its target, its token file and a 1 s
scrape and evaluation interval, loading deploy/prometheus/rules/ with every alert's ``for``
set to 0 s (the expressions as they are). It scrapes one ``svc serve`` (2 workers, the
metrics token set) whose alias ``svc-smart`` has one upstream nobody listens on, and
``svc-code`` that one before a live one.

After one request of every kind and then a dozen to ``svc-smart``: the target is up with the
bearer token, every rule loads and evaluates, the recorded failure ratio of the dead provider
is 1 and of the live one 0, and exactly the two alerts that should fire do
(SvcUpstreamErrorRatioHigh for the provider, SvcUpstreamUnavailable for the alias): none of
the others fires on a healthy server. Then every expression of the rules and of the Grafana
dashboard is accepted by this Prometheus, and every svc metric and label it queries is in
what Prometheus scraped from svc's ``/metrics``."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML, pinned in requirements/test.lock

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import ROOT, Server, start_server
from tests.support.grafana import dashboard_expressions, variable_queries
from tests.support.processes import free_port, stop_process
from tests.support.prometheus_rules import RULES, prometheus_binary, rule_catalogue, rules
from tests.support.promql import TARGET_LABELS, Catalogue, Series, problems

pytestmark = pytest.mark.e2e

DEPLOY_PROMETHEUS = ROOT / "deploy" / "prometheus"
METRICS_TOKEN = "scrape-metrics-token-0123456789"
DOWN_REQUESTS = 12  # over the alerts' floors: 10 attempts, 5 502s per 5 minutes
HELLO = [{"role": "user", "content": "hello"}]


class Prometheus:
    """One Prometheus in the foreground, in a folder of its own (configuration, rules,
    token file, storage)."""

    def __init__(self, folder: Path, target: str) -> None:
        self.folder = folder
        self.port = free_port()
        (folder / "token").write_text(METRICS_TOKEN)
        rules = folder / "rules"
        rules.mkdir()
        for path in RULES:
            loaded = yaml.safe_load(path.read_text())
            for group in loaded["groups"]:
                for rule in group["rules"]:
                    if "alert" in rule:
                        rule["for"] = "0s"
            (rules / path.name).write_text(yaml.safe_dump(loaded, sort_keys=False))
        config = yaml.safe_load((DEPLOY_PROMETHEUS / "prometheus.yml").read_text())
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        assert config["rule_files"] == ["rules/*.yml"]
        config["rule_files"] = [str(rules / "*.yml")]
        (job,) = config["scrape_configs"]
        job["authorization"]["credentials_file"] = str(folder / "token")
        (static,) = job["static_configs"]
        static["targets"] = [target]
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Prometheus:
        self._process = subprocess.Popen(
            [prometheus_binary("prometheus"),
             f"--config.file={self.folder / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL,
            stderr=(self.folder / "prometheus.log").open("wb"),
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self._process.poll() is None:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            "prometheus did not start:\n" + (self.folder / "prometheus.log").read_text()
        )

    def stop(self) -> None:
        if self._process is not None:
            stop_process(self._process)
            self._process = None

    def api(self, path: str, **params: str) -> Any:
        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = response.json()
        assert body["status"] == "success", (path, params, body)
        return body["data"]

    def query(self, expr: str) -> dict[str, float]:
        """An instant query's samples: their labels as JSON (sorted, ``__name__`` aside)
        → value."""
        return {
            json.dumps({k: v for k, v in sorted(s["metric"].items()) if k != "__name__"}): float(
                s["value"][1]
            )
            for s in self.api("query", query=expr)["result"]
        }

    def firing(self) -> set[tuple[str, str]]:
        """(alert name, its labels as JSON) of the alerts firing now."""
        return {
            (alert["labels"]["alertname"], json.dumps(alert["labels"], sort_keys=True))
            for alert in self.api("alerts")["alerts"]
            if alert["state"] == "firing"
        }

    def wait_for(self, expr: str, timeout_s: float = 15) -> dict[str, float]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.query(expr)
            if found:
                return found
            time.sleep(0.2)
        raise AssertionError(f"{expr} had no value after {timeout_s} s")


def _models_file(path: Path, mock: MockProcess) -> Path:
    with socket.socket() as unused:  # a port nobody listens on: every attempt is refused
        unused.bind(("127.0.0.1", 0))
        dead = unused.getsockname()[1]
    path.write_text(
        "[providers.mock]\n"
        f'base_url = "{mock.base_url}"\n'
        "[providers.down]\n"
        f'base_url = "http://127.0.0.1:{dead}/v1"\n'
        "[aliases.svc-fast]\n"
        # priced: the upstream cost panel has series to query
        'upstreams = [{ provider = "mock", model = "fast",'
        " cost = { input = 0.4, output = 1.6 } }]\n"
        "[aliases.svc-code]\n"  # fails over past the dead provider
        'upstreams = [{ provider = "down", model = "first" },'
        ' { provider = "mock", model = "fast" }]\n'
        "[aliases.svc-smart]\n"  # the dead provider alone: 502
        'upstreams = [{ provider = "down", model = "only" }]\n'
    )
    return path


@dataclass
class Scraped:
    prometheus: Prometheus
    server: Server


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    """svc and Prometheus, after one request of every kind and ``DOWN_REQUESTS`` to the
    dead alias (svc-smart), once Prometheus has scraped them all."""
    tmp = tmp_path_factory.mktemp("prometheus-scrape")
    mock = start_in_subprocess(chunks=3)
    srv: Server | None = None
    prometheus: Prometheus | None = None
    try:
        srv = start_server(
            tmp,
            workers=2,
            extra_env={
                "SVC_MODELS_FILE": str(_models_file(tmp / "models.toml", mock)),
                "SVC_METRICS_TOKEN": METRICS_TOKEN,
                "SVC_SWEEP_INTERVAL_S": "0.5",  # passes within each scrape interval
            },
        )
        folder = tmp / "prometheus"
        folder.mkdir()
        prometheus = Prometheus(folder, srv.root_url.removeprefix("http://")).start()
        pid = srv.new_account(1_000_000)
        live = {"authorization": f"Bearer {srv.new_key(pid)}"}
        test = {"authorization": f"Bearer {srv.new_key(pid, environment='test')}"}

        def chat(alias: str, headers: dict[str, str]) -> int:
            body = {"model": alias, "messages": HELLO}
            url = f"{srv.base_url}/chat/completions"
            return httpx.post(url, json=body, headers=headers, timeout=30).status_code

        # every series first (a counter's first sample counts nothing), then the failures
        assert chat("svc-fast", live) == 200
        assert chat("svc-code", live) == 200
        assert chat("svc-fast", test) == 200
        assert chat("svc-smart", live) == 502
        assert chat("svc-fast", {"authorization": "Bearer svc_live_wrong"}) == 401
        prometheus.wait_for('svc_upstream_attempts_total{provider="down"} >= 2')
        for _ in range(DOWN_REQUESTS):
            assert chat("svc-smart", live) == 502
        for _ in range(3):  # the live provider's attempts go on too: its ratio is 0, not 0/0
            assert chat("svc-fast", live) == 200
        prometheus.wait_for(
            f'svc_upstream_attempts_total{{provider="down"}} >= {2 + DOWN_REQUESTS}'
        )
        yield Scraped(prometheus, srv)
    finally:
        if prometheus is not None:
            prometheus.stop()
        if srv is not None:
            stop_process(srv.process)
        mock.stop()


def test_the_target_is_scraped_with_the_metrics_token(scraped: Scraped) -> None:
    target = scraped.server.root_url.removeprefix("http://")
    assert scraped.prometheus.query('up{job="svc"}') == {
        json.dumps({"instance": target, "job": "svc"}): 1.0
    }
    unauthorized = httpx.get(f"{scraped.server.root_url}/metrics", timeout=10)
    assert unauthorized.status_code == 401  # so the scrapes above did send the token


def test_every_rule_loads_and_evaluates(scraped: Scraped) -> None:
    groups = scraped.prometheus.api("rules")["groups"]
    assert sorted(group["name"] for group in groups) == ["svc-alerts", "svc-recording"]
    loaded = [rule for group in groups for rule in group["rules"]]
    assert len(loaded) == len(rules())
    for rule in loaded:
        assert rule["health"] == "ok", rule


def test_the_recorded_failure_ratio_is_1_for_the_dead_provider_0_for_the_live(
    scraped: Scraped,
) -> None:
    ratio = scraped.prometheus.wait_for(
        'job_provider:svc_upstream_attempts_failed:ratio_rate5m{provider="down"} == 1'
    )
    assert list(ratio.values()) == [1.0]
    # the recorded ratio is the latest evaluation's: wait for one that saw the live
    # provider's last attempts scraped (before it, its rate may still read 0/0)
    live = scraped.prometheus.wait_for(
        'job_provider:svc_upstream_attempts_failed:ratio_rate5m{provider="mock"} == 0'
    )
    assert list(live.values()) == [0.0]


def test_the_provoked_alerts_fire_and_no_other(scraped: Scraped) -> None:
    expected = [
        ("SvcUpstreamErrorRatioHigh", {"provider": "down", "severity": "warning"}),
        ("SvcUpstreamUnavailable", {"model": "svc-smart", "severity": "critical"}),
    ]
    wanted = {
        (name, json.dumps({"alertname": name, "job": "svc", **labels}, sort_keys=True))
        for name, labels in expected
    }
    deadline = time.monotonic() + 15
    while (firing := scraped.prometheus.firing()) != wanted and time.monotonic() < deadline:
        time.sleep(0.2)
    assert firing == wanted


def _scraped_catalogue(prometheus: Prometheus) -> Catalogue:
    """Every svc metric Prometheus scraped from svc's /metrics, with its label names, plus
    ``up`` and the recorded series."""
    labels: dict[str, set[str]] = {}
    for series in prometheus.api("series", **{"match[]": '{__name__=~"svc_.+"}'}):
        name = series.pop("__name__")
        labels.setdefault(name, set()).update(series)
    catalogue: Catalogue = {name: Series(frozenset(found)) for name, found in labels.items()}
    catalogue["up"] = Series(TARGET_LABELS)
    return rule_catalogue(catalogue)


def test_every_expression_parses_and_queries_what_svc_exposes(scraped: Scraped) -> None:
    catalogue = _scraped_catalogue(scraped.prometheus)
    assert "svc_time_to_first_byte_seconds_bucket" in catalogue  # the streams were scraped
    expressions = [
        *((rule.get("alert") or rule["record"], rule["expr"]) for rule in rules()),
        *dashboard_expressions(),
        *((f"${name}", expr) for name, expr, _ in variable_queries()),
    ]
    for where, expr in expressions:
        scraped.prometheus.api("query", query=expr)  # parsed and evaluated
        assert problems(expr, catalogue) == [], where
