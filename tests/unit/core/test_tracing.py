"""The traces' switch (``app.core.tracing``): on only when an OTLP endpoint is configured,
set up by the SDK's own ``OTEL_*`` variables, and with traces off not one module of
opentelemetry imported."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core import tracing

ROOT = Path(__file__).resolve().parents[3]
ENDPOINT = "http://127.0.0.1:9"  # nothing is exported in these tests: no span is made


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No OTEL_* variable but those a test sets; tracing off before and after."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(tracing, "ACTIVE", None)
    yield monkeypatch
    tracing.stop()


@pytest.mark.parametrize(
    ("variables", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT + "/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "false"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_SERVICE_NAME": "svc"}, False),  # configuration without an endpoint
    ],
)
def test_traces_are_on_only_with_an_endpoint(variables: dict[str, str], on: bool) -> None:
    assert tracing.configured(variables) is on


@pytest.mark.parametrize(
    ("variables", "reason"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, None),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, None),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"),
        (
            {
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
            },
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json",
        ),
        (  # the traces' own setting wins
            {
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            },
            None,
        ),
        ({"OTEL_TRACES_EXPORTER": "console"}, "OTEL_TRACES_EXPORTER=console"),
    ],
)
def test_only_otlp_over_http_protobuf_is_exported(
    variables: dict[str, str], reason: str | None
) -> None:
    found = tracing.unsupported(variables)
    assert (found if found is None else found.split(" ")[0]) == reason


def test_start_without_an_endpoint_is_off(environ: pytest.MonkeyPatch) -> None:
    assert tracing.start() is None
    assert tracing.ACTIVE is None
    tracing.stop()  # nothing to stop


def test_an_unsupported_protocol_leaves_traces_off_and_says_why(
    environ: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    environ.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ENDPOINT)
    environ.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    assert tracing.start() is None
    assert [r.getMessage() for r in caplog.records if r.name == "svc.tracing"] == [
        "traces are off: OTEL_EXPORTER_OTLP_PROTOCOL=grpc (svc exports http/protobuf only)"
    ]


def test_an_exporter_that_cannot_be_set_up_leaves_traces_off(
    environ: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from app.core.tracing import otel

    def failing() -> otel.Tracing:
        raise FileNotFoundError(2, "No such file or directory", "/etc/collector-ca.pem")

    environ.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ENDPOINT)
    environ.setattr(otel, "from_environment", failing)
    assert tracing.start() is None
    assert tracing.ACTIVE is None
    (line,) = [r.getMessage() for r in caplog.records if r.name == "svc.tracing"]
    assert line.startswith("traces are off: the exporter cannot be set up (FileNotFoundError")
    assert "/etc/collector-ca.pem" in line


def test_start_sets_up_the_sdk_from_the_environment(environ: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    from app.core.metrics import installed_version

    environ.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ENDPOINT)
    environ.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    environ.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    environ.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=staging")
    active = tracing.start()
    assert active is not None
    assert tracing.start() is active  # once per process
    resource = dict(active.provider.resource.attributes)
    assert resource["service.name"] == "svc"  # svc's own, where the variables name none
    assert resource["service.version"] == installed_version()
    assert resource["deployment.environment.name"] == "staging"
    sampler = active.provider.sampler
    assert isinstance(sampler, ParentBased)
    assert isinstance(sampler._root, TraceIdRatioBased)
    assert sampler._root.rate == 0.25
    tracing.stop()
    assert tracing.ACTIVE is None


def test_the_service_name_is_the_operators_when_set(environ: pytest.MonkeyPatch) -> None:
    environ.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ENDPOINT + "/v1/traces")
    environ.setenv("OTEL_SERVICE_NAME", "gateway-eu")
    environ.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.version=42")
    active = tracing.start()
    assert active is not None
    resource = active.provider.resource.attributes
    assert (resource["service.name"], resource["service.version"]) == ("gateway-eu", "42")


def test_traces_off_import_nothing_of_the_sdks_traces() -> None:
    """What a worker imports and runs to serve, with traces off, leaves the traces' modules
    unimported: svc's own and the SDK's tracing and exporter (``svc serve`` itself, which
    never starts them, too). redis-py looks for the SDK's metrics when it is imported, and
    finds them installed: that part of opentelemetry is loaded, and unused."""
    code = (
        "import sys\n"
        "import app.cli, app.http.app, app.http.rsgi.gateway, app.runtime\n"
        "from app.core import tracing\n"
        "assert tracing.start() is None\n"
        "traces = ('app.core.tracing.otel', 'app.completion.traced', 'opentelemetry.sdk.trace',\n"
        "          'opentelemetry.exporter', 'opentelemetry.trace.propagation.tracecontext')\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(traces))\n"
        "assert loaded == [], loaded\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
