"""A real OTLP/HTTP trace receiver on loopback: decodes the official protobuf.

The OpenTelemetry Collector does not install here (no Debian package; building it from
Go modules is out of reach), so the receiver is a plain HTTP server that takes
``POST /v1/traces`` as the OTLP/HTTP specification says (``application/x-protobuf``, an
``ExportTraceServiceRequest``, optionally gzipped) and answers an
``ExportTraceServiceResponse``; what it received is read as plain spans.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.fakes import serve


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it (ids as hex, times in epoch nanoseconds)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int
    service: str

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


class OtlpReceiver:
    """The spans every export brought, in order of arrival."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.content_types: list[str] = []
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/v1/traces", self._traces, methods=["POST"])])

    async def _traces(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest.FromString(body)
        spans = []
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        ReceivedSpan(
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.kind,
                            span.start_time_unix_nano,
                            span.end_time_unix_nano,
                            {a.key: _value(a.value) for a in span.attributes},
                            span.status.code,
                            str(resource.get("service.name")),
                        )
                    )
        with self._lock:
            self.spans += spans
            self.content_types.append(request.headers.get("content-type", ""))
        answer = ExportTraceServiceResponse().SerializeToString()
        return Response(answer, media_type="application/x-protobuf")

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        """The spans of one trace."""
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]


@contextmanager
def otlp_receiver() -> Iterator[tuple[OtlpReceiver, str]]:
    """A receiver on a free loopback port and its base URL (``telemetry.otel.endpoint``)."""
    receiver = OtlpReceiver()
    with serve(receiver.app) as url:
        yield receiver, url
