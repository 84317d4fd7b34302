"""The OpenTelemetry SDK behind ``app.core.tracing``, imported only once traces are on.

One ``Tracing`` per worker: its tracer provider (not the SDK's global one: nothing else in
svc traces, and a provider set up per worker after the fork stays the worker's own), the
W3C trace context read from a request and written into an upstream request, and the span of
a streaming request. The attributes every span may carry are named here; the values svc
records never include a prompt, a completion's text, a key or its id, an account id, or an
upstream's URL or credentials.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes

from app.core.metrics import installed_version

DEFAULT_SERVICE_NAME = "svc"
"""``service.name`` unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` names one."""

# The attributes (OpenTelemetry's semantic conventions: GenAI, HTTP, database; svc's own
# under svc.*).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
MAX_TOKENS = "gen_ai.request.max_tokens"
TEMPERATURE = "gen_ai.request.temperature"
TOP_P = "gen_ai.request.top_p"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
ERROR_TYPE = "error.type"
HTTP_METHOD = "http.request.method"
HTTP_ROUTE = "http.route"
HTTP_STATUS = "http.response.status_code"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
DB_SYSTEM = "db.system.name"
DB_OPERATION = "db.operation.name"
DB_PROCEDURE = "db.stored_procedure.name"
API = "svc.api"
ENVIRONMENT = "svc.environment"
OUTCOME = "svc.outcome"
CREDITS_RESERVED = "svc.credits.reserved"
CREDITS_CHARGED = "svc.credits.charged"
REQUEST_ID = "svc.request_id"
USAGE_SOURCE = "svc.usage.source"
TTFB_MS = "svc.time_to_first_output_ms"
ATTEMPT = "svc.upstream.attempt"
ATTEMPTS = "svc.upstream.attempts"
REFUSAL = "svc.refusal"
REPLAY = "svc.idempotent_replay"
SCRIPT_STATUS = "svc.script.status"

CHAT = "chat"
"""``gen_ai.operation.name`` of every completion, and the first word of its span's name."""

_TRACE_CONTEXT = TraceContextTextMapPropagator()
_CONTEXT_HEADERS = ("traceparent", "tracestate")


def failed(span: Span, error_type: str) -> None:
    """Mark ``span`` failed: status ERROR, ``error.type`` says how (no message: an
    exception's text may name what a trace must not carry)."""
    span.set_status(Status(StatusCode.ERROR))
    span.set_attribute(ERROR_TYPE, error_type)


class RequestSpan:
    """The span of one request to a streaming endpoint (kind SERVER), while it is served."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def answered(self, status: int, error: str) -> None:
        """The response's status, and the error code it answered with ("" when none). A
        refusal (4xx) is the client's error: ``error.type`` says which, and the span's
        status stays unset, as the HTTP conventions have it for a server; a 5xx fails it."""
        self.span.set_attribute(HTTP_STATUS, status)
        if not error:
            return
        if status >= 500:
            failed(self.span, error)
        else:
            self.span.set_attribute(ERROR_TYPE, error)


class Tracing:
    """A worker's tracer provider, and the spans of its streaming requests."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer("svc", installed_version())

    def shutdown(self) -> None:
        """Export what is queued and stop (the batch processor's own bound on the wait)."""
        self.provider.shutdown()

    @contextmanager
    def request(
        self, header: Callable[[str], str | None], *, method: str, route: str, request_id: str
    ) -> Iterator[RequestSpan]:
        """The span of one request, current while it is served (the spans of its reserve,
        upstream attempts and settlement are its children, tasks started meanwhile
        included). It continues the client's trace when the request carries a W3C
        ``traceparent`` (and ``tracestate``); otherwise it starts one. Named "chat" until
        the request's model is known (``app.completion.traced``)."""
        carrier = {name: value for name in _CONTEXT_HEADERS if (value := header(name))}
        parent = _TRACE_CONTEXT.extract(carrier, Context()) if carrier else Context()
        span = self.tracer.start_span(
            CHAT,
            parent,
            SpanKind.SERVER,
            {OPERATION: CHAT, HTTP_METHOD: method, HTTP_ROUTE: route, REQUEST_ID: request_id},
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            yield RequestSpan(span)
        except BaseException as exc:
            failed(span, type(exc).__qualname__)
            raise
        finally:
            otel_context.detach(token)
            span.end()

    @contextmanager
    def child(self, name: str, kind: SpanKind, attributes: Attributes) -> Iterator[Span]:
        """A span of the current one's (the request's), for the time the block runs; an
        exception fails it with its class's name as ``error.type``."""
        span = self.tracer.start_span(name, kind=kind, attributes=attributes)
        try:
            yield span
        except BaseException as exc:
            failed(span, type(exc).__qualname__)
            raise
        finally:
            span.end()


def context_headers(span: Span) -> bytes:
    """The W3C trace context that names ``span`` as the parent (``traceparent``, and the
    ``tracestate`` its trace came with), as HTTP/1.1 header lines, each ending in CRLF."""
    carrier: dict[str, str] = {}
    _TRACE_CONTEXT.inject(carrier, trace.set_span_in_context(span))
    return b"".join(
        f"{name}: {value}\r\n".encode("latin-1")
        for name, value in carrier.items()
        if "\r" not in value and "\n" not in value
    )


def resource() -> Resource:
    """The resource the SDK reads from ``OTEL_RESOURCE_ATTRIBUTES`` and
    ``OTEL_SERVICE_NAME``, with svc's name and version where they name none."""
    found = Resource.create()
    own: dict[str, str] = {}
    if str(found.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        own[SERVICE_NAME] = DEFAULT_SERVICE_NAME
    if SERVICE_VERSION not in found.attributes:
        own[SERVICE_VERSION] = installed_version()
    return found.merge(Resource(own))


def from_environment() -> Tracing:
    """A worker's tracing as the ``OTEL_*`` variables configure it: the sampler
    (``OTEL_TRACES_SAMPLER``, ``_ARG``; default: the parent's decision, else always), the
    batch processor (``OTEL_BSP_*``) and the OTLP/HTTP exporter (``OTEL_EXPORTER_OTLP_*``:
    endpoint, headers, timeout, compression, certificates), each read by the SDK itself."""
    provider = TracerProvider(resource=resource())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return Tracing(provider)
