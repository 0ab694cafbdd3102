"""OpenTelemetry traces of every decision, sent over OTLP/HTTP (``telemetry.otel``).

One span per request, started when the request arrives (``Tracing.enter``, under the
client's W3C ``traceparent`` when it sends one) and ended once the request is recorded
(``Trace.end``), with a child per step: cache, gate, draft, judge, and the plan's steps
(verify, spill, continue, serve). The children are not timed live: the steps already
tell what they did as events (``app.story``), the speculator stamps each with the time
it was added (``Trace.mark``), and the spans are built from that stamped story after the
request (``app.telemetry.trace_spans``), with explicit start and end times. So the
request path does no tracing work but a stamp per event, and with tracing off none.

Spans go through a ``BatchSpanProcessor`` (exported from its own thread) to
``{endpoint}/v1/traces``; the app's shutdown flushes them (``close``). Only imported when
an endpoint is set (``app.telemetry.trace_context.start_tracing``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.config.otel import OtelConfig
from app.keys import caller
from app.story import Event
from app.telemetry.logs import request_id
from app.telemetry.trace_context import current, outgoing
from app.telemetry.trace_spans import plain, request_attributes, steps
from app.vocabulary import Outcome

if TYPE_CHECKING:
    from app.call import Call
    from app.upstreams import Upstream

_PROPAGATOR = TraceContextTextMapPropagator()
FLUSH_S = 2.0  # the shutdown's wait for the last spans to be exported


class Tracing:
    """The tracer and its exporter, made once at start-up and closed at shutdown."""

    def __init__(self, config: OtelConfig) -> None:
        self.provider = TracerProvider(
            sampler=ParentBased(TraceIdRatioBased(config.sample_rate)),
            resource=Resource.create({"service.name": config.service_name}),
            shutdown_on_exit=False,  # the app's shutdown closes it (``close``)
        )
        self.exporter = OTLPSpanExporter(endpoint=f"{config.endpoint}/v1/traces")
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("specproxy")

    def enter(self, headers: Mapping[str, str]) -> None:
        """A request arrived: its span starts now, under the client's ``traceparent`` if it
        sent one; the upstream calls will carry this span's (``outgoing``) and the request
        keeps its ``Trace`` (``current``) if it is sampled."""
        parent = _PROPAGATOR.extract(headers)
        span = self.tracer.start_span("chat", context=parent, kind=SpanKind.SERVER)
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        outgoing.set(carrier.get("traceparent"))
        if span.is_recording():
            current.set(Trace(self.tracer, span))

    def close(self) -> None:
        """Export what is left, then stop the exporter's thread; a collector that does not
        answer holds the stop up for ``FLUSH_S`` at most (its export's retries are cut)."""
        # The SDK's flush takes no timeout (opentelemetry-python #4568): a timer shuts the
        # exporter down, which cuts the retries of an export still under way.
        cut = threading.Timer(FLUSH_S, self.exporter.shutdown)
        cut.start()
        try:
            self.provider.shutdown()
        finally:
            cut.cancel()


class Trace:
    """One request's span, and its story's events stamped as they were added."""

    __slots__ = ("anchor_ns", "anchor_s", "marks", "span", "tracer")

    def __init__(self, tracer: Tracer, span: Span) -> None:
        self.tracer, self.span = tracer, span
        # The story is stamped on the perf_counter clock; spans take epoch nanoseconds.
        self.anchor_ns, self.anchor_s = time.time_ns(), time.perf_counter()
        self.marks: list[tuple[Event, float]] = []

    def mark(self, *events: Event) -> None:
        """``events`` were added to the request's story now."""
        now = time.perf_counter()
        self.marks += [(event, now) for event in events]

    def end(self, call: Call, upstreams: Mapping[str, Upstream]) -> None:
        """The request is recorded: its steps as child spans, then its own span ends."""
        rec = call.record
        ended = call.started + (rec.total_s or 0.0)
        providers = {name: up.config.provider for name, up in upstreams.items()}
        under = trace.set_span_in_context(self.span)
        for step in steps(rec, call.events, self.marks, call.started, ended, providers):
            kind = SpanKind.CLIENT if step.client else SpanKind.INTERNAL
            child = self.tracer.start_span(
                step.name,
                context=under,
                kind=kind,
                attributes=step.attributes,
                start_time=self._ns(step.start),
            )
            if step.error is not None:
                child.set_status(Status(StatusCode.ERROR, step.error))
            child.end(end_time=self._ns(step.end))
        requested = call.raw.get("model")
        attributes = request_attributes(
            rec, call.events, requested if isinstance(requested, str) else None, providers
        )
        self.span.update_name(f"chat {attributes.get('gen_ai.request.model', '')}".strip())
        self.span.set_attributes(attributes)
        if rec.outcome is Outcome.ERROR:
            self.span.set_status(Status(StatusCode.ERROR, ",".join(rec.reasons) or None))
        self.span.end(end_time=self._ns(ended))

    def refused(self, status: int) -> None:
        """The request was refused before the pipeline (``Services.refuse``): its span ends
        now with the status; a 5xx is an error, a client's 4xx is not (the HTTP conventions)."""
        current.set(None)  # ended once
        who = caller.get()
        attributes = {
            "http.response.status_code": status,
            "error.type": str(status),
            "specproxy.outcome": "refused",
            "specproxy.request_id": request_id.get(),
            "specproxy.key.name": who.name if who.key_id else None,
            "specproxy.key.team": who.team,
        }
        self.span.set_attributes(plain(attributes))
        if status >= 500:
            self.span.set_status(Status(StatusCode.ERROR, str(status)))
        self.span.end()

    def _ns(self, t: float) -> int:
        """A ``perf_counter`` time as epoch nanoseconds."""
        return self.anchor_ns + int((t - self.anchor_s) * 1e9)
