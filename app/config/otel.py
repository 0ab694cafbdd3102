"""Tracing's settings (``telemetry.otel``): where OTLP/HTTP spans go, and how many."""

from __future__ import annotations

from pydantic import Field, field_validator

from app.config.models import _plain_url
from app.config.strict import Strict


class OtelConfig(Strict):
    """OpenTelemetry traces of every decision, sent over OTLP/HTTP; off without an endpoint.
    Needs the ``otel`` extra (``pip install 'specproxy[otel]'``)."""

    endpoint: str | None = Field(
        None,
        description="OTLP/HTTP base URL (spans go to {endpoint}/v1/traces), e.g. "
        "http://localhost:4318; None = tracing off",
    )
    sample_rate: float = Field(
        1.0,
        ge=0,
        le=1,
        description="share of requests traced (by trace id); a client's sampled traceparent "
        "is followed as it says",
    )
    service_name: str = Field("specproxy", min_length=1, description="the spans' service.name")

    @field_validator("endpoint")
    @classmethod
    def _plain_endpoint(cls, value: str | None) -> str | None:
        return _plain_url(value).rstrip("/") if value else None
