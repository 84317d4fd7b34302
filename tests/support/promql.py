"""A light PromQL reader and checker, for the expressions this repository writes (the Grafana
dashboard's, the Prometheus rules'): regular expressions enough to find the selectors with
their matchers, the labels of ``by``/``without``/``on``/``ignoring``/``group_left``/
``group_right``, the bare metric names (``parse``), after Grafana's variables are replaced
(``expand``); and what in an expression a catalogue of metrics (``Catalogue``) does not have
(``problems``): a metric, a label, a label value, a grouping label.

``documented_catalogue`` is svc's metrics as docs/operations.md's table has them
(``tests.support.metrics_table``). tests/unit/test_grafana_dashboard.py,
tests/unit/test_prometheus_rules.py and tests/e2e/test_prometheus_scrape.py use all this."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from app.core.errors import ErrorKind
from tests.support.metrics_table import OPERATIONS, documented

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
