"""The Grafana dashboard of deploy/grafana/ (issue 34 item 4) holds together: Grafana's
current schema, every panel on the ``DS_PROMETHEUS`` data source variable, no two panels on
the same cells, every metric of svc shown somewhere; and every PromQL expression in it
queries only metrics svc exposes, with labels they have and label values they take.

Here the metrics are those of the table in docs/operations.md, which
tests/e2e/test_metrics_table.py holds against a real server's ``/metrics``;
tests/e2e/test_prometheus_scrape.py checks the same expressions against what a real
Prometheus scraped from a real svc, and has that Prometheus parse each one.

The PromQL reading and checking is ``tests.support.promql``'s, the dashboard's reading
``tests.support.grafana``'s; tests/unit/test_prometheus_rules.py and the e2e test use them
too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML, pinned in requirements/test.lock

from tests.support.grafana import (
    DASHBOARD,
    GRAFANA,
    dashboard,
    dashboard_expressions,
    panels,
    variable_queries,
)
from tests.support.metrics_table import OPERATIONS, documented
from tests.support.promql import (
    HISTOGRAM_SERIES,
    Matcher,
    documented_catalogue,
    expand,
    parse,
    problems,
)

ROOT = Path(__file__).resolve().parents[2]
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def test_the_reader_finds_selectors_grouping_and_bare_names() -> None:
    query = parse(
        'histogram_quantile(0.95, sum by (le, route) (rate(svc_a_bucket{job="svc", '
        'route=~"/v1/x|/v1/y"}[5m]))) / on (job) group_left max(b:c:d offset 1h) and up'
    )
    assert query.selectors == [
        ("svc_a_bucket", [Matcher("job", "=", "svc"), Matcher("route", "=~", "/v1/x|/v1/y")]),
        ("b:c:d", []),
        ("up", []),
    ]
    assert query.grouping == {"le", "route", "job"}
    assert query.by == {"le", "route"}
    assert expand('rate(x{job="$job"}[$__rate_interval])') == 'rate(x{job="svc"}[5m])'


def test_the_checker_names_what_is_wrong() -> None:
    catalogue = documented_catalogue()
    settled = 'sum by (model) (rate(svc_credits_total{movement="settled"}[5m]))'
    assert problems(settled, catalogue) == []
    assert problems('svc_credits_total{movement="settle", colour="x"}', catalogue) == [
        "svc_credits_total{movement} never takes the value 'settle'",
        "svc_credits_total has no label colour",
    ]
    assert problems("sum by (provider) (svc_open_streams)", catalogue) == [
        "no metric of the expression has the label provider it groups by"
    ]
    assert problems('svc_rejections_total{code="invalid_key"}', catalogue) == [
        "svc_rejections_total{code} never takes the value 'invalid_key'"
    ]
    assert problems("svc_request_duration_seconds_total", catalogue) == [
        "no metric svc_request_duration_seconds_total"
    ]


def test_the_dashboard_is_grafanas_current_schema_on_a_datasource_variable() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 39
    assert board["uid"] == "svc-overview"
    assert board["title"]
    assert board.get("id") is None  # Grafana gives its own
    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    source = variables["DS_PROMETHEUS"]
    assert (source["type"], source["query"]) == ("datasource", "prometheus")
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]
    for panel in panels(board):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["type"] in {"timeseries", "stat"}, panel["title"]
        assert panel["title"], panel
        assert panel["description"], panel["title"]
        assert panel["targets"], panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(set(ref_ids)) == len(ref_ids), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_panels_have_their_own_ids_and_cells() -> None:
    board = dashboard()
    every = [*board["panels"], *(p for row in board["panels"] for p in row.get("panels", []))]
    ids = [panel["id"] for panel in every]
    assert len(set(ids)) == len(ids), "two panels share an id"
    taken: dict[tuple[int, int], str] = {}
    for panel in every:
        grid = panel["gridPos"]
        assert grid["w"] > 0, panel["title"]
        assert 0 <= grid["x"] <= grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"{panel['title']} covers {taken[x, y]}"
                taken[x, y] = panel["title"]


@pytest.mark.parametrize(("where", "expr"), dashboard_expressions())
def test_each_panel_queries_what_svc_exposes(where: str, expr: str) -> None:
    assert problems(expr, documented_catalogue()) == [], where


def test_the_variables_query_what_svc_exposes() -> None:
    catalogue = documented_catalogue()
    for name, expr, label in variable_queries():
        assert problems(expr, catalogue) == [], name
        for metric in parse(expr).metrics:
            assert label in catalogue[metric].labels, (name, metric, label)


def test_each_legend_names_labels_the_query_keeps() -> None:
    for panel in panels(dashboard()):
        for target in panel["targets"]:
            kept = parse(expand(target["expr"])).by
            named = set(_LEGEND.findall(target.get("legendFormat", "")))
            assert named <= kept, (panel["title"], target["refId"], named - kept)


def test_every_metric_of_svc_is_on_the_dashboard() -> None:
    shown = {metric for _, expr in dashboard_expressions() for metric in parse(expr).metrics}
    shown |= {name.removesuffix(suffix) for name in shown for suffix in HISTOGRAM_SERIES}
    missing = sorted(set(documented(OPERATIONS.read_text())) - shown)
    assert missing == [], f"svc's metrics no panel shows: {missing}"


def test_the_provisioning_loads_the_dashboard_from_the_kits_prometheus() -> None:
    (source,) = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())[
        "datasources"
    ]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert source["isDefault"] is True
    (provider,) = yaml.safe_load((GRAFANA / "provisioning/dashboards/svc.yml").read_text())[
        "providers"
    ]
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    grafana = compose["services"]["grafana"]
    mounts = dict(volume.split(":")[:2] for volume in grafana["volumes"])
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{DASHBOARD.name}"
