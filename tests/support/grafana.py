"""The Grafana dashboard of deploy/grafana/, read: the dashboard, its panels (those inside
collapsed rows included), the PromQL expression of every panel target and of every
``label_values(...)`` variable, Grafana's variables replaced (``tests.support.promql``).

tests/unit/test_grafana_dashboard.py checks the dashboard; tests/e2e/test_prometheus_scrape.py
has a real Prometheus run its expressions."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tests.support.promql import expand

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "svc.json"


def dashboard() -> dict[str, Any]:
    loaded = json.loads(DASHBOARD.read_text())
    assert isinstance(loaded, dict)
    return loaded


def panels(board: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel but the rows, those inside collapsed rows included."""
    for panel in board["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def dashboard_expressions() -> list[tuple[str, str]]:
    """(where, expression) of every panel target, variables replaced."""
    return [
        (f"{panel['title']} / {target['refId']}", expand(target["expr"]))
        for panel in panels(dashboard())
        for target in panel["targets"]
    ]


def variable_queries() -> list[tuple[str, str, str]]:
    """(variable, expression, label) of each ``label_values(expression, label)`` variable."""
    found = []
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable["query"]["query"])
        assert match, f"${variable['name']}: not label_values(...)"
        found.append((variable["name"], expand(match.group(1)), match.group(2)))
    return found
