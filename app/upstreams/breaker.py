"""Circuit breaker for one upstream: stop calling it while it keeps failing.

    closed --N consecutive failures--> open --cool-down--> half_open
    half_open --probe succeeds--> closed;  --probe fails--> open (cool-down again)

Pure state over an injectable clock; the upstream asks ``allow()`` before a
call and reports ``success()`` / ``failure()`` after.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from typing import TypedDict


class BreakerStatus(TypedDict):
    """A circuit as /stats shows it."""

    state: str
    consecutive_failures: int
    opened_total: int
    retry_in_s: float


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """Counts consecutive failures; lets one probe through after the cool-down."""

    def __init__(
        self, failure_threshold: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probing = False
        self._adopted = False  # open because another replica said so, not by failures here
        self.opened_total = 0

    @property
    def state(self) -> BreakerState:
        if self._state is BreakerState.OPEN and self._clock() - self._opened_at >= self.cooldown_s:
            self._state = BreakerState.HALF_OPEN
        return self._state

    def allow(self) -> bool:
        """Whether a call may go out now (half-open: only one probe at a time)."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.HALF_OPEN and not self._probing:
            self._probing = True
            return True
        return False

    def ready(self) -> bool:
        """Whether ``allow()`` would let a call through now (without taking the probe)."""
        state = self.state
        return state is BreakerState.CLOSED or (
            state is BreakerState.HALF_OPEN and not self._probing
        )

    def retry_in(self) -> float:
        """Seconds until the next probe may go out (0 when calls are allowed)."""
        if self.state is not BreakerState.OPEN:
            return 0.0
        return max(0.0, self.cooldown_s - (self._clock() - self._opened_at))

    def open_for(self, seconds: float) -> None:
        """Open now for ``seconds`` (another replica saw the upstream fail); a longer
        opening of its own stays. Not counted in ``opened_total``: that one is this one's."""
        if seconds <= 0 or self.retry_in() >= seconds:
            return
        self._state = BreakerState.OPEN
        self._probing = False
        self._adopted = True
        self._opened_at = self._clock() - self.cooldown_s + seconds

    def abandon(self) -> None:
        """A call that ended without a verdict (cancelled): free the probe slot."""
        self._probing = False

    def success(self) -> None:
        self._failures = 0
        self._probing = False
        self._state = BreakerState.CLOSED

    def failure(self) -> None:
        self._probing = False
        self._failures += 1
        if self._state is BreakerState.HALF_OPEN or self._failures >= self.failure_threshold:
            if self._state is not BreakerState.OPEN:
                self.opened_total += 1
            self._state = BreakerState.OPEN
            self._adopted = False
            self._opened_at = self._clock()

    def why_open(self) -> str:
        """Why calls are refused now, naming only failures that happened here."""
        cause = (
            "opened by another replica"
            if self._adopted
            else f"after {self.failure_threshold} consecutive failures"
        )
        return f"circuit open {cause}; next probe in {self.retry_in():.1f} s"

    def status(self) -> BreakerStatus:
        return {
            "state": self.state.value,
            "consecutive_failures": self._failures,
            "opened_total": self.opened_total,
            "retry_in_s": round(self.retry_in(), 3),
        }
