"""OpenTelemetry traces: off unless an OTLP endpoint is configured, one switch per process.

Traces are on in a worker when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, unless ``OTEL_SDK_DISABLED`` is ``true`` or
``OTEL_TRACES_EXPORTER`` is ``none``. ``start`` then sets up the process's tracer provider
(``otel``: spans exported in batches as OTLP over HTTP/protobuf, configured by the SDK's own
``OTEL_*`` variables; docs/operations.md, "Traces"). Each granian worker starts it once it
has forked (``app.runtime.open_services``) and stops it last when it stops
(``Services.close``): the spans still queued go out then.

Off, nothing has imported opentelemetry, and all the hot path asks is ``ACTIVE is None``
(``app.http.streams.serve_stream``, once per request). The SDK is imported by ``start`` alone,
and the watcher of the completions that records their spans (``app.completion.traced``) is
given to the completion service once per worker, when its services are built.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.tracing.otel import Tracing

log = logging.getLogger("svc.tracing")

ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
"""Either turns traces on (the first is the traces' own, and wins)."""
PROTOCOL = "http/protobuf"
"""The one OTLP protocol svc exports with."""

ACTIVE: Tracing | None = None
"""This process's tracing once ``start`` set it up; None: off (the hot path's one check)."""


def unsupported(environ: Mapping[str, str]) -> str | None:
    """Why traces that are configured cannot be exported as asked (None: they can): svc
    exports OTLP over HTTP/protobuf only."""
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter not in ("", "otlp"):
        return f"OTEL_TRACES_EXPORTER={exporter[:40]} (svc exports otlp only)"
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = environ.get(name, "").strip().lower()
        if protocol:
            if protocol != PROTOCOL:
                return f"{name}={protocol[:40]} (svc exports {PROTOCOL} only)"
            break  # the traces' own setting wins over the general one
    return None


def configured(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for traces."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINTS)


def start() -> Tracing | None:
    """Set this process's tracing up when the environment asks for it (a granian worker's,
    after the fork: the SDK's exporting thread is the process's own); None when traces are
    off. A setting svc cannot follow is logged, and leaves traces off: serving goes on."""
    global ACTIVE
    if ACTIVE is not None:
        return ACTIVE
    if not configured(os.environ):
        return None
    reason = unsupported(os.environ)
    if reason is not None:
        log.error("traces are off: %s", reason)
        return None
    from app.core.tracing import otel  # the SDK: imported only now

    try:
        ACTIVE = otel.from_environment()
    except Exception as exc:  # a certificate file that cannot be read, …
        log.error("traces are off: the exporter cannot be set up (%s: %s)", type(exc).__name__, exc)
        return None
    return ACTIVE


def stop() -> None:
    """Export the spans still queued and stop exporting (a worker that stops); nothing to do
    when traces are off."""
    global ACTIVE
    active, ACTIVE = ACTIVE, None
    if active is not None:
        active.shutdown()
