"""The metrics table of docs/operations.md, read: each ``svc_`` metric it documents with its
type, its label names and, where the table lists them, the values a label takes.

tests/e2e/test_metrics_table.py holds the table against a real server's ``/metrics``; the
PromQL checks (``tests.support.promql``) take svc's metrics from it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
SECTION = "## Metrics"
_NAME = re.compile(r"`([a-z_]+)`")
_VALUE = re.compile(r"`([^`]+)`")
# a label and, when its parenthesis lists nothing but backticked values, those values
_LABEL = re.compile(r"`([a-z_]+)`(?:\s*\(((?:`[^`]+`(?:,\s*)?)+)\))?")
_PARENTHESIS = re.compile(r"\([^()]*\)")


class Documented(NamedTuple):
    type: str
    labels: frozenset[str]
    values: dict[str, frozenset[str]]  # the labels whose values the table lists, those


def documented(text: str) -> dict[str, Documented]:
    """The table's rows: metric name → its type, label names and listed label values."""
    section = text.split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, Documented] = {}
    for line in section.splitlines():
        if not line.startswith("| `svc_"):
            continue
        name_cell, type_cell, labels_cell = (cell.strip() for cell in line.split("|")[1:4])
        (name,) = _NAME.findall(name_cell)
        values = {
            label: frozenset(_VALUE.findall(listed))
            for label, listed in _LABEL.findall(labels_cell)
            if listed
        }
        names_only = labels_cell
        while _PARENTHESIS.search(names_only):  # innermost first: a link in a parenthesis
            names_only = _PARENTHESIS.sub("", names_only)
        labels = frozenset(_NAME.findall(names_only))
        assert name not in rows, f"{name} is in the table twice"
        rows[name] = Documented(type_cell, labels, values)
    return rows
