"""svc's Prometheus rules (deploy/prometheus/rules/), read: the rule files, their groups and
rules, the recorded series they add to a catalogue of metrics (``tests.support.promql``);
and where the Prometheus binaries are (``prometheus_binary``).

tests/unit/test_prometheus_rules.py checks the rules with promtool;
tests/e2e/test_prometheus_scrape.py loads them into a real Prometheus."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML, pinned in requirements/test.lock

from tests.support.promql import Catalogue, Series, parse

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES = sorted((PROMETHEUS_DIR / "rules").glob("*.yml"))


def prometheus_binary(name: str) -> str:
    """``promtool`` or ``prometheus``: in ``SVC_TEST_PROMETHEUS`` (a folder) when set, else on
    PATH or in /usr/bin. Missing, the test is skipped when run by hand, and fails on CI
    (``make test`` installs them there: tests/ensure-prometheus.sh)."""
    folder = os.environ.get("SVC_TEST_PROMETHEUS")
    path = folder if folder else f"{os.environ.get('PATH', '')}:/usr/bin"
    found = shutil.which(name, path=path)
    if found is None:
        missing = f"no {name} (make test installs it: tests/ensure-prometheus.sh)"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    return found


def rule_groups() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, group) for path in RULES for group in yaml.safe_load(path.read_text())["groups"]]


def rules() -> list[dict[str, Any]]:
    return [rule for _, group in rule_groups() for rule in group["rules"]]


def records() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "record" in rule]


def rule_catalogue(base: Catalogue) -> Catalogue:
    """``base`` plus the recorded series: each with the labels of its expression's
    ``by (...)`` clauses, or else those of the series it reads."""
    catalogue = dict(base)
    for rule in records():
        query = parse(rule["expr"])
        read = [catalogue[m].labels for m in query.metrics if m in catalogue]
        labels = query.by or set().union(*read)
        catalogue[rule["record"]] = Series(frozenset(labels))
    return catalogue
