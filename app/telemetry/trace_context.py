"""The request's trace on its way, without importing OpenTelemetry.

Tracing (``telemetry.otel``) is off unless an endpoint is set, and the OpenTelemetry SDK
is an optional extra, so what the request path reads lives here: ``current``, the
request's ``Trace`` (None: tracing off or the request not sampled; a ``Call`` takes it
when made), and ``outgoing``, the W3C ``traceparent`` the upstream calls carry (None:
tracing off). Both are set once per request by ``Tracing.enter`` (``app.api.deps``);
with tracing off the request path reads two None values and does nothing else.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.config.otel import OtelConfig
    from app.telemetry.tracing import Trace, Tracing

current: ContextVar[Trace | None] = ContextVar("trace", default=None)
outgoing: ContextVar[str | None] = ContextVar("traceparent", default=None)


def start_tracing(config: OtelConfig) -> Tracing | None:
    """The exporter and tracer ``config`` asks for (None: no endpoint, tracing off)."""
    if config.endpoint is None:
        return None
    from app.config.loading import ConfigError

    try:
        from app.telemetry.tracing import Tracing
    except ImportError as exc:
        raise ConfigError(
            "telemetry.otel.endpoint is set but OpenTelemetry is not installed: "
            "pip install 'specproxy[otel]'"
        ) from exc
    return Tracing(config)
