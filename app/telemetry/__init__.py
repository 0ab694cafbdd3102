"""Where a finished request goes: ``Stats`` (which /stats and /metrics both render) and
the spec log."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from app.pricing import Late
from app.record import RequestRecord
from app.telemetry.spec_log import SpecLog
from app.telemetry.stats import Stats

log = logging.getLogger("specproxy.telemetry")


class Observer(Protocol):
    """Told of each finished record after ``Stats`` (reads it, never writes it): the keys'
    limits (``app.keys.admission``)."""

    def finished(self, rec: RequestRecord) -> None: ...


class Telemetry:
    """Hands one ``RequestRecord`` to each sink, once: it is counted in ``Stats`` only."""

    def __init__(
        self, stats: Stats, spec_log: SpecLog | None = None, observers: Sequence[Observer] = ()
    ) -> None:
        self.stats = stats
        self.spec_log = spec_log
        self.observers = tuple(observers)

    @property
    def keeps_content(self) -> bool:
        """Whether prompts and answers are wanted (the spec log's opt-in)."""
        return bool(self.spec_log and self.spec_log.with_content)

    def record(self, rec: RequestRecord, *, log_line: bool = True) -> None:
        """Count a finished request; speculative drafts also get a log line
        (later, by ``write_log``, when ``log_line`` is false: an audit is running).

        Sinks are isolated: one that fails is logged and the others still run,
        and the request's own outcome (or error) is never replaced by it.
        """
        sinks: list[Callable[[RequestRecord], None]] = [self.stats.record]
        if log_line and self.spec_log is not None and rec.draft is not None:
            sinks.append(self.spec_log.write)
        sinks += [observer.finished for observer in self.observers]
        for sink in sinks:
            try:
                sink(rec)
            except Exception:
                log.exception("telemetry sink %s failed", getattr(sink, "__qualname__", sink))

    def charge(self, late: Late) -> None:
        """Count what a request spent after it was counted (its audit, a draft beside the
        cloud's answer)."""
        try:
            self.stats.charge(late)
        except Exception:
            log.exception("telemetry sink Stats.charge failed")

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
