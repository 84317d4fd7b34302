"""The metrics table of docs/operations.md is what a real server exposes (issue 34 item 2):
after traffic through ``svc serve`` (2 workers) against the mock upstream — a completion, a
Responses call that fails over past an upstream 500 to a provider serving the Responses API,
a stream the upstream drops, a refused key, a plain route — every metric of the table is in
``/metrics`` with the table's type and exactly its label names (and, where the table lists a
label's values, no other value), and every ``svc_`` metric of ``/metrics`` is in the table.

The table is read by ``tests.support.metrics_table``, which the PromQL checks share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import Server, start_server, stop_server
from tests.support.metrics_table import OPERATIONS, Documented, documented

pytestmark = pytest.mark.e2e


class Exposed(NamedTuple):
    type: str
    label_sets: set[frozenset[str]]  # every sample's label names (a histogram's "le" aside)
    values: dict[str, set[str]]


def exposed(text: str) -> dict[str, Exposed]:
    """``/metrics``'s svc_ metrics by the name the table gives them (a counter's with
    ``_total``, as it is scraped)."""
    found: dict[str, Exposed] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("svc_"):
            continue
        name = f"{family.name}_total" if family.type == "counter" else family.name
        metric = found.setdefault(name, Exposed(family.type, set(), {}))
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k != "le"}
            metric.label_sets.add(frozenset(labels))
            for label, value in labels.items():
                metric.values.setdefault(label, set()).add(value)
    return found


def test_the_table_reads_as_names_types_labels_and_values() -> None:
    rows = documented(OPERATIONS.read_text())
    assert rows["svc_open_streams"] == Documented("gauge", frozenset(), {})
    credits = rows["svc_credits_total"]
    assert credits.type == "counter"
    assert credits.labels == {"movement", "environment", "model"}
    assert credits.values == {
        "movement": {"reserved", "settled", "refunded"},
        "environment": {"live", "test"},
    }
    assert rows["svc_requests_total"].labels == {"route", "status", "model"}
    assert "route" not in rows["svc_requests_total"].values  # examples, not every value
    assert rows["svc_build_info"].labels == {"version", "python", "granian"}
    assert rows["svc_rejections_total"].labels == {"code"}
    assert rows["svc_upstream_attempts_total"].values["outcome"] >= {"2xx", "5xx", "timeout"}


@pytest.fixture(scope="module")
def mock() -> Iterator[MockProcess]:
    process = start_in_subprocess(chunks=5)
    yield process
    process.stop()


def _models_file(path: Path, base_url: str) -> Path:
    path.write_text(
        "[providers.mock]\n"
        f'base_url = "{base_url}"\n'
        "[providers.native]\n"
        f'base_url = "{base_url}"\n'
        "responses_api = true\n"
        "[aliases.svc-fast]\n"
        # priced: its completions' upstream cost is counted (svc_upstream_cost_total)
        'upstreams = [{ provider = "mock", model = "fast",'
        " cost = { input = 0.4, output = 1.6 } }]\n"
        "[aliases.svc-code]\n"  # a 500, then the provider serving the Responses API
        'upstreams = [{ provider = "mock", model = "code-fail500" },'
        ' { provider = "native", model = "code-good" }]\n'
        "[aliases.svc-smart]\n"  # dropped after two chunks
        'upstreams = [{ provider = "mock", model = "smart-drop2" }]\n'
    )
    return path


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory, mock: MockProcess) -> Iterator[str]:
    """``/metrics``'s text after one request of every kind."""
    tmp = tmp_path_factory.mktemp("metrics-table")
    srv: Server = start_server(
        tmp,
        workers=2,
        extra_env={"SVC_MODELS_FILE": str(_models_file(tmp / "models.toml", mock.base_url))},
    )
    try:
        key = srv.new_key(srv.new_account(1_000_000))
        auth = {"authorization": f"Bearer {key}"}

        def post(path: str, body: dict[str, object], headers: dict[str, str]) -> httpx.Response:
            return httpx.post(f"{srv.base_url}{path}", json=body, headers=headers, timeout=30)

        hello = [{"role": "user", "content": "hello"}]
        for alias in ("svc-fast", "svc-smart"):
            answer = post("/chat/completions", {"model": alias, "messages": hello}, auth)
            assert answer.status_code == 200, answer.text
            assert answer.text.endswith("data: [DONE]\n\n")
        assert "upstream_unavailable" in answer.text  # svc-smart's stream was dropped
        native = post("/responses", {"model": "svc-code", "input": "hello"}, auth)
        assert native.status_code == 200, native.text
        assert "response.completed" in native.text
        refused = post(
            "/chat/completions",
            {"model": "svc-fast", "messages": hello},
            {"authorization": "Bearer svc_live_wrong"},
        )
        assert refused.status_code == 401
        assert httpx.get(f"{srv.base_url}/models", headers=auth).status_code == 200
        scraped = httpx.get(f"{srv.root_url}/metrics", timeout=30)
        assert scraped.status_code == 200
        yield scraped.text
    finally:
        stop_server(srv.process)


def test_every_metric_of_the_table_is_exposed_with_its_type_and_label_names(
    traffic: str,
) -> None:
    rows = documented(OPERATIONS.read_text())
    metrics = exposed(traffic)
    missing = sorted(set(rows) - set(metrics))
    assert missing == [], f"in docs/operations.md's table, not in /metrics: {missing}"
    for name, row in rows.items():
        metric = metrics[name]
        assert metric.type == row.type, name
        assert metric.label_sets == {row.labels}, (name, metric.label_sets)
        for label, listed in row.values.items():
            unlisted = metric.values.get(label, set()) - listed
            assert not unlisted, f"{name}{{{label}}} has values the table does not list: {unlisted}"


def test_every_svc_metric_exposed_is_in_the_table(traffic: str) -> None:
    undocumented = sorted(set(exposed(traffic)) - set(documented(OPERATIONS.read_text())))
    assert undocumented == [], f"in /metrics, not in docs/operations.md's table: {undocumented}"


def test_the_traffic_was_counted_where_it_happened(traffic: str) -> None:
    """The operator's questions answered from the scrape: the failover past a 500 is a 5xx
    attempt (not a connect failure), the drop a mid-stream error, the tokens and credits
    under their aliases, the Responses call under its route."""
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(traffic)
        for sample in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples.get((name, frozenset(labels.items())), 0.0)

    assert value("svc_upstream_attempts_total", provider="mock", outcome="5xx") == 1
    assert value("svc_upstream_attempts_total", provider="mock", outcome="2xx") == 2
    assert value("svc_upstream_attempts_total", provider="native", outcome="2xx") == 1
    first = {"provider": "mock", "phase": "first_token"}
    assert value("svc_upstream_errors_total", outcome="5xx", **first) == 1
    mid = {"provider": "mock", "phase": "stream"}
    assert value("svc_upstream_errors_total", outcome="stream_error", **mid) == 1
    assert value("svc_upstream_failovers_total", model="svc-code") == 1
    assert value("svc_tokens_total", model="svc-fast", direction="output") == 5
    assert value("svc_tokens_total", model="svc-code", direction="input") > 0
    responses = {"route": "/v1/responses", "model": "svc-code"}
    assert value("svc_time_to_first_byte_seconds_count", **responses) == 1
    assert value("svc_requests_total", status="200", **responses) == 1
    charged = value("svc_credits_total", movement="settled", environment="live", model="svc-fast")
    assert charged > 0
    assert value("svc_settlements_total", outcome="upstream_error") == 1
    assert value("svc_open_streams") == 0
