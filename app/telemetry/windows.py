"""The recent past, by the second: what ``/stats`` → ``windows`` and the alerts read.

Each finished request (and each charge made for one already counted, an audit) lands in
its second's ``Second``; a window sums the seconds it spans. Seconds older than the
longest window are dropped, so at most 300 buckets are kept, whatever the traffic.
Several workers' seconds add up by their timestamp (``merged``): the monotonic clock is
shared by the processes of one machine.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from app.baseline import Calibration
from app.spend import Spend
from app.telemetry.tallies import Speculation, ratio

WINDOWS = {"30s": 30.0, "5m": 300.0}


@dataclass(slots=True)
class Second:
    """Everything recorded within one second."""

    second: int
    requests: int = 0
    speculative: int = 0
    spilled: int = 0
    speculation: Speculation = field(default_factory=Speculation)
    spend: Spend = field(default_factory=Spend)

    def state(self) -> list[Any]:
        return [
            self.second,
            self.requests,
            self.speculative,
            self.spilled,
            asdict(self.speculation),
            self.spend.state(),
        ]

    def add_state(self, state: list[Any]) -> None:
        """Add another worker's ``state()`` of the same second."""
        _, requests, speculative, spilled, speculation, spend = state
        self.requests += requests
        self.speculative += speculative
        self.spilled += spilled
        self.speculation.merge(Speculation(**speculation))
        self.spend.merge(Spend.from_state(spend))


class RecentSeconds:
    """The seconds of the longest window, oldest first."""

    def __init__(self) -> None:
        self._seconds: deque[Second] = deque()

    def at(self, now: float) -> Second:
        """The bucket of ``now``'s second (a new one, past seconds trimmed, when it begins)."""
        second = int(now)
        if not self._seconds or self._seconds[-1].second != second:
            self._seconds.append(Second(second))
            self.trim(now)
        return self._seconds[-1]

    def trim(self, now: float) -> None:
        horizon = now - max(WINDOWS.values())
        while self._seconds and self._seconds[0].second < horizon:
            self._seconds.popleft()

    def window(
        self, seconds: float, now: float, started: float, calibration: Calibration
    ) -> dict[str, Any]:
        """The last ``seconds`` summed: cost (calibrated on every pair), requests, the
        spill-over rate and the speculation summary (rates over the time it spans)."""
        recent = [b for b in self._seconds if b.second >= now - seconds]
        span = min(seconds, max(now - started, 1e-9))
        speculation, spend = Speculation(), Spend()
        for bucket in recent:
            speculation.merge(bucket.speculation)
            spend.merge(bucket.spend)
        return {
            "cost": spend.summary(calibration),
            "requests": sum(b.requests for b in recent),
            "spill_over_rate": ratio(
                sum(b.spilled for b in recent), sum(b.speculative for b in recent)
            ),
            **speculation.summary(span),
        }

    def state(self) -> list[list[Any]]:
        return [bucket.state() for bucket in self._seconds]

    @classmethod
    def merged(cls, states: Iterable[list[list[Any]]]) -> RecentSeconds:
        """Several workers' ``state()`` added up, second by second."""
        by_second: dict[int, Second] = {}
        for state in states:
            for row in state:
                by_second.setdefault(row[0], Second(row[0])).add_state(row)
        merged = cls()
        merged._seconds.extend(by_second[second] for second in sorted(by_second))
        return merged
