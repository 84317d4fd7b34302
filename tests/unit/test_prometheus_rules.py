"""svc's Prometheus rules (deploy/prometheus/rules/, issue 34 item 3): ``promtool check
rules`` accepts them and ``promtool test rules`` passes their unit tests
(deploy/prometheus/tests/); every alert has a severity, a summary, a description and a
runbook, and a unit test in which it fires and one in which it stays quiet; every recording
rule is read by an alert or tested; every expression queries only metrics svc exposes, with
their labels and label values (docs/operations.md's table, as in
tests/unit/test_grafana_dashboard.py). The rules are read by ``tests.support.prometheus_rules``,
the expressions checked by ``tests.support.promql``.

promtool comes with Debian's prometheus package (tests/ensure-prometheus.sh installs it for
``make test``). Missing, these tests are skipped when run by hand and fail on CI."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML, pinned in requirements/test.lock

from tests.support.prometheus_rules import (
    PROMETHEUS_DIR,
    RULES,
    prometheus_binary,
    records,
    rule_catalogue,
    rule_groups,
    rules,
)
from tests.support.promql import documented_catalogue, parse, problems

ROOT = Path(__file__).resolve().parents[2]
RULE_TESTS = sorted((PROMETHEUS_DIR / "tests").glob("*.yml"))
SEVERITIES = {"critical", "warning"}
# level:metric:operations (https://prometheus.io/docs/practices/rules/), job kept at each level
RECORD_NAME = r"job(_[a-z]+)*:svc_[a-z0-9_]+:[a-z0-9_]+"


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def test_there_are_rule_files_and_unit_tests() -> None:
    assert [path.name for path in RULES] == ["svc-alerts.yml", "svc-recording.yml"]
    assert RULE_TESTS
    for path, group in rule_groups():
        assert path.stem == group["name"], "one group per file, named as the file"


def test_promtool_accepts_the_rules() -> None:
    done = run(prometheus_binary("promtool"), "check", "rules", *map(str, RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_pass_their_unit_tests() -> None:
    done = run(prometheus_binary("promtool"), "test", "rules", *map(str, RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == len(RULE_TESTS), done.stdout


def test_every_unit_test_file_loads_every_rule_file() -> None:
    for path in RULE_TESTS:
        loaded = yaml.safe_load(path.read_text())
        files = {(path.parent / name).resolve() for name in loaded["rule_files"]}
        if any("alert_rule_test" in test for test in loaded["tests"]):
            assert files == {rule.resolve() for rule in RULES}, path.name


def test_every_alert_says_how_bad_what_and_what_to_check() -> None:
    names = [alert["alert"] for alert in alerts()]
    assert len(set(names)) == len(names)
    for alert in alerts():
        name = alert["alert"]
        assert name.startswith("Svc"), name
        assert alert["labels"]["severity"] in SEVERITIES, name
        annotations = alert["annotations"]
        assert set(annotations) == {"summary", "description", "runbook"}, name
        assert all(text.strip() for text in annotations.values()), name
        steps = [line for line in annotations["runbook"].splitlines() if line[:1].isdigit()]
        assert len(steps) >= 2, f"{name}: the runbook lists what to check, in order"
        assert "for" in alert, f"{name} fires on a single evaluation"


def test_every_alert_has_a_test_that_fires_it_and_one_that_keeps_it_quiet() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {alert["alert"] for alert in alerts()}
    assert names - fires == set(), "alerts no unit test fires"
    assert names - quiet == set(), "alerts no unit test keeps quiet"
    assert (fires | quiet) - names == set(), "unit tests of alerts that do not exist"


def test_every_recording_rule_is_read_by_an_alert_or_tested() -> None:
    read = {metric for rule in rules() for metric in parse(rule["expr"]).metrics}
    tested = {
        case["expr"].strip()
        for path in RULE_TESTS
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("promql_expr_test", [])
    }
    for rule in records():
        assert rule["record"] in read | tested, rule["record"]


def test_recording_rules_are_named_by_level_metric_and_operations() -> None:
    catalogue = rule_catalogue(documented_catalogue())
    for rule in records():
        name = rule["record"]
        assert re.fullmatch(RECORD_NAME, name), name
        level = set(name.split(":")[0].split("_"))
        assert level == catalogue[name].labels, f"{name} keeps {sorted(catalogue[name].labels)}"


@pytest.mark.parametrize("rule", rules(), ids=lambda rule: rule.get("alert") or rule.get("record"))
def test_each_rule_queries_what_svc_exposes(rule: dict[str, Any]) -> None:
    assert problems(rule["expr"], rule_catalogue(documented_catalogue())) == []
