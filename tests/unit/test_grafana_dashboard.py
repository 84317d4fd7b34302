"""The Grafana dashboard of deploy/grafana/ (issue 34 item 4) holds together: Grafana's
current schema, every panel on the ``DS_PROMETHEUS`` data source variable, no two panels on
the same cells, every metric of svc shown somewhere; and every PromQL expression in it
queries only metrics svc exposes, with labels they have and label values they take.

Here the metrics are those of the table in docs/operations.md, which
tests/e2e/test_metrics_table.py holds against a real server's ``/metrics``;
tests/e2e/test_prometheus_scrape.py checks the same expressions against what a real
Prometheus scraped from a real svc, and has that Prometheus parse each one.

The PromQL reading here is light (regular expressions, enough for the expressions this
repository writes): the selectors with their matchers, the labels of ``by``/``without``/
``on``/``ignoring``/``group_left``/``group_right``, the bare metric names.
tests/unit/test_prometheus_rules.py and the e2e test use it too."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML, pinned in requirements/test.lock

from app.core.errors import ErrorKind
from tests.e2e.test_metrics_table import OPERATIONS, documented

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "svc.json"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
TARGET_LABELS = frozenset({"job", "instance"})  # what Prometheus adds to every scraped series
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")

# Grafana's variables, as a query would be sent: the dashboard's own and the built-in ones
GRAFANA_VALUES = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1h",
    "job": "svc",
    "instance": ".*",
}
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")

_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_SELECTOR = re.compile(r"(?<![\w:])([a-zA-Z_:][\w:]*)?\s*\{([^{}]*)\}")
_MATCHER = re.compile(r'\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_RANGE = re.compile(r"\[[^\]]*\]")
_NAME = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(?![\w:(])(?!\s*\()")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
     "offset", "bool", "inf", "nan"}
)  # fmt: skip
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_ALTERNATIVES = re.compile(r"[\w./{}-]+(?:\|[\w./{}-]+)*")


class Matcher(NamedTuple):
    label: str
    op: str
    value: str


@dataclass
class Query:
    """What an expression reads: (metric, its matchers) per selector, and the labels its
    grouping clauses name."""

    selectors: list[tuple[str, list[Matcher]]] = field(default_factory=list)
    grouping: set[str] = field(default_factory=set)
    by: set[str] = field(default_factory=set)  # of by (...) alone: the result's labels

    @property
    def metrics(self) -> set[str]:
        return {metric for metric, _ in self.selectors}


def expand(expr: str, values: Mapping[str, str] = GRAFANA_VALUES) -> str:
    """The expression with Grafana's ``$name``/``${name}`` variables replaced."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in values, f"unknown Grafana variable ${name} in {expr!r}"
        return values[name]

    return _VARIABLE.sub(value, expr)


def parse(expr: str) -> Query:
    """The selectors and grouping labels of a PromQL expression (without variables)."""
    query = Query()
    text = re.sub(r"#[^\n]*", "", expr)
    for match in _GROUPING.finditer(text):
        labels = {label.strip() for label in match.group(2).split(",") if label.strip()}
        query.grouping |= labels
        if match.group(1) == "by":
            query.by |= labels
    text = _GROUPING.sub(" ", text)
    for match in _SELECTOR.finditer(text):
        metric, body = match.group(1), match.group(2)
        assert metric, f"a selector without a metric name in {expr!r}"
        matchers = [Matcher(*m.groups()) for m in _MATCHER.finditer(body)]
        rebuilt = ",".join(f'{m.label}{m.op}"{m.value}"' for m in matchers)
        assert re.sub(r"\s", "", rebuilt) == re.sub(r"\s", "", body).rstrip(","), body
        query.selectors.append((metric, matchers))
    text = _RANGE.sub(" ", _SELECTOR.sub(" ", text))
    for match in _NAME.finditer(text):
        if match.group(1) not in _KEYWORDS:
            query.selectors.append((match.group(1), []))
    return query


@dataclass(frozen=True)
class Series:
    """A metric as it is queried: its label names, and the values of those whose values
    are known (every other value is a mistake)."""

    labels: frozenset[str]
    values: Mapping[str, frozenset[str]] = field(default_factory=dict)


Catalogue = dict[str, Series]


def documented_catalogue() -> Catalogue:
    """svc's metrics as docs/operations.md's table has them (each histogram as its
    ``_bucket``, ``_sum`` and ``_count`` series), plus ``up``. The error codes of
    ``svc_rejections_total`` are svc's own ``ErrorKind`` codes."""
    catalogue: Catalogue = {"up": Series(TARGET_LABELS)}
    for name, row in documented(OPERATIONS.read_text()).items():
        labels = row.labels | TARGET_LABELS
        values = dict(row.values)
        if name == "svc_rejections_total":
            values["code"] = frozenset(kind.code for kind in ErrorKind)
        if row.type == "histogram":
            catalogue[f"{name}_bucket"] = Series(labels | {"le"}, values)
            catalogue[f"{name}_sum"] = Series(labels, values)
            catalogue[f"{name}_count"] = Series(labels, values)
        else:
            catalogue[name] = Series(labels, values)
    return catalogue


def problems(expr: str, catalogue: Catalogue) -> list[str]:
    """What in ``expr`` (variables already replaced) the catalogue does not have: a metric,
    a label of a metric, a value a label never takes, a grouping label none of the
    expression's metrics has."""
    found: list[str] = []
    query = parse(expr)
    labels_read: set[str] = set()
    for metric, matchers in query.selectors:
        series = catalogue.get(metric)
        if series is None:
            found.append(f"no metric {metric}")
            continue
        labels_read |= series.labels
        for matcher in matchers:
            if matcher.label not in series.labels:
                found.append(f"{metric} has no label {matcher.label}")
                continue
            known = series.values.get(matcher.label)
            if known is None or not matcher.value:
                continue
            if matcher.op in ("=", "!="):
                wanted = {matcher.value}
            elif _ALTERNATIVES.fullmatch(matcher.value):
                wanted = set(matcher.value.split("|"))
            else:
                continue  # a pattern: nothing to compare
            for value in sorted(wanted - known):
                found.append(f"{metric}{{{matcher.label}}} never takes the value {value!r}")
    for label in sorted(query.grouping - labels_read):
        found.append(f"no metric of the expression has the label {label} it groups by")
    return found


# --- The dashboard ----------------------------------------------------------------------


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
