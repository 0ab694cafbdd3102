"""``logging:`` and ``telemetry:``: the logs, the speculation log, /stats' health flags,
/metrics and traces."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.config.otel import OtelConfig
from app.config.strict import Strict


class LoggingConfig(Strict):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="log level; --log-level overrides"
    )
    spec_log_file: str | None = Field(
        None, description="the JSON-lines speculation log; --spec-log-file overrides; off if unset"
    )
    spec_log_max_bytes: int = Field(100_000_000, ge=1024, description="rotate past this size")
    spec_log_backups: int = Field(3, ge=0, description="rotated files kept")
    spec_log_content: bool = Field(False, description="also log prompts and answers (privacy!)")
    spec_adjust_log_file: str | None = Field(
        None, description="JSON lines, one per change of adaptive K (SPEC_ADJUST); off if unset"
    )


class AlertConfig(Strict):
    """Thresholds of the health flags in /stats (seed 003's healthy/poor ranges)."""

    min_acceptance_rate: float = Field(
        0.4, ge=0, le=1, description="flag low_acceptance_rate under this"
    )
    min_acceptance_length: float = Field(
        1.2, ge=1, description="flag speculation_not_paying under this mean acceptance length"
    )
    spill_rate_jump: float = Field(
        0.25,
        ge=0,
        le=1,
        description="flag spill_over_rate_jump when the 30 s rate is this far above the 5 min one",
    )
    min_drafts: int = Field(20, ge=1, description="evidence needed before flagging")


class TelemetryConfig(Strict):
    alerts: AlertConfig = Field(
        AlertConfig(), description="thresholds of the health flags in /stats"
    )
    scrape_local_metrics: bool = Field(
        True, description="re-export llama-server's /metrics (started with --metrics)"
    )
    otel: OtelConfig = Field(
        OtelConfig(), description="OpenTelemetry traces of every decision (docs/teams.md)"
    )
    max_key_labels: int = Field(
        50,
        ge=1,
        description="keys with their own key label in /metrics (the busiest); the rest "
        "are summed as key=other per team (docs/teams.md)",
    )
