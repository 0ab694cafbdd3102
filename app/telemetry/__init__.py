"""Where a finished request goes: /stats counters, Prometheus metrics, the spec log."""

from __future__ import annotations

from typing import Protocol

from app.telemetry.spec_log import SpecLog
from app.telemetry.stats import RequestRecord, Stats


class Observer(Protocol):
    def observe(self, rec: RequestRecord) -> None: ...


class Telemetry:
    """Fans one ``RequestRecord`` out to every sink, once."""

    def __init__(
        self, stats: Stats, metrics: Observer | None = None, spec_log: SpecLog | None = None
    ) -> None:
        self.stats = stats
        self.metrics = metrics
        self.spec_log = spec_log

    @property
    def keeps_content(self) -> bool:
        """Whether prompts and answers are wanted (the spec log's opt-in)."""
        return bool(self.spec_log and self.spec_log.with_content)

    def record(self, rec: RequestRecord) -> None:
        """Count a finished request everywhere; speculative drafts also get a log line."""
        self.stats.record(rec)
        if self.metrics is not None:
            self.metrics.observe(rec)
        if self.spec_log is not None and rec.draft is not None:
            self.spec_log.write(rec)

    def close(self) -> None:
        """Flush the spec log."""
        if self.spec_log is not None:
            self.spec_log.close()
