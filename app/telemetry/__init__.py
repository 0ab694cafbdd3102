"""Where a finished request goes: /stats counters, Prometheus metrics, the spec log."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from app.pricing import Charge
from app.record import RequestRecord
from app.telemetry.spec_log import SpecLog
from app.telemetry.stats import Stats

log = logging.getLogger("specproxy.telemetry")


class Observer(Protocol):
    def observe(self, rec: RequestRecord) -> None: ...

    def charge(self, charges: Iterable[Charge]) -> None: ...


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

    def record(self, rec: RequestRecord, *, log_line: bool = True) -> None:
        """Count a finished request everywhere; speculative drafts also get a log line
        (later, by ``write_log``, when ``log_line`` is false: an audit is running).

        Sinks are isolated: one that fails is logged and the others still run,
        and the request's own outcome (or error) is never replaced by it.
        """
        sinks: list[Callable[[RequestRecord], None]] = [self.stats.record]
        if self.metrics is not None:
            sinks.append(self.metrics.observe)
        if log_line and self.spec_log is not None and rec.draft is not None:
            sinks.append(self.spec_log.write)
        for sink in sinks:
            try:
                sink(rec)
            except Exception:
                log.exception("telemetry sink %s failed", getattr(sink, "__qualname__", sink))

    def charge(self, charges: list[Charge]) -> None:
        """Count calls made for a request after it was counted (its audit)."""
        sinks: list[Callable[[list[Charge]], None]] = [self.stats.charge]
        if self.metrics is not None:
            sinks.append(self.metrics.charge)
        for sink in sinks:
            try:
                sink(charges)
            except Exception:
                log.exception("telemetry sink %s failed", getattr(sink, "__qualname__", sink))

    def write_log(self, rec: RequestRecord) -> None:
        """The spec-log line of a request recorded without it."""
        if self.spec_log is not None and rec.draft is not None:
            try:
                self.spec_log.write(rec)
            except Exception:
                log.exception("the spec log failed")

    def close(self) -> None:
        """Flush the spec log."""
        if self.spec_log is not None:
            self.spec_log.close()
