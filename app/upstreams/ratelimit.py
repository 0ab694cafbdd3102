"""What the cloud's rate-limit headers say is left, and whether to spend it. Pure.

The budget must never lock the proxy out: numbers that come without a reset time go
stale after ``stale_s``, values that are not finite are ignored, and while the budget
is low one call is let through every ``probe_every_s`` (like a breaker's half-open
state), so fresh headers can arrive and end the drought.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypedDict

_FIELDS = {
    "x-ratelimit-remaining-tokens-minute": "tokens",
    "x-ratelimit-remaining-requests-day": "requests",
    "x-ratelimit-reset-tokens-minute": "tokens_reset_s",
    "x-ratelimit-reset-requests-day": "requests_reset_s",
    "x-ratelimit-limit-tokens-minute": "tokens_limit",
    "x-ratelimit-limit-requests-day": "requests_limit",
}


class BudgetStatus(TypedDict):
    """A rate budget as /stats shows it (None: the upstream has not said)."""

    next_probe_s: float
    remaining_tokens_minute: float | None
    remaining_requests_day: float | None
    limit_tokens_minute: float | None
    limit_requests_day: float | None
    reset_tokens_s: float | None
    reset_requests_s: float | None
    seen_s_ago: float | None


@dataclass
class RateBudget:
    """The latest remaining budget the upstream reported, and when it resets."""

    clock: Callable[[], float] = time.monotonic
    probe_every_s: float = 30.0  # while low, one call may go out this often
    stale_s: float = 60.0  # numbers with no reset time are believed this long
    tokens: float | None = None
    requests: float | None = None
    tokens_limit: float | None = None
    requests_limit: float | None = None
    tokens_reset_s: float | None = None
    requests_reset_s: float | None = None
    seen_at: float | None = None
    sent_at: float | None = None  # the last call that went out

    def update(self, headers: Mapping[str, str]) -> None:
        """Take the numbers from a response's headers; a window's numbers come together,
        so one with no (or a bad) reset header has none; bad remaining values are skipped."""
        found = False
        for header, name in _FIELDS.items():
            value = _number(headers.get(header))
            if name.endswith("_reset_s"):
                setattr(self, name, value if value is not None and value >= 0 else None)
            elif value is not None:
                setattr(self, name, value)
                found = True
        if found:
            self.seen_at = self.clock()

    def sent(self) -> None:
        """A call went out (a probe, while the budget is low)."""
        self.sent_at = self.clock()

    def _reset(self, reset_s: float | None) -> bool:
        """Whether the window the numbers describe has rolled over since they were seen
        (numbers without a reset time go stale after ``stale_s``)."""
        if self.seen_at is None:
            return True
        return self.clock() - self.seen_at >= (self.stale_s if reset_s is None else reset_s)

    def _probe_in(self) -> float:
        """Seconds until a probe may go out (0: now)."""
        if self.sent_at is None:
            return 0.0
        return max(0.0, self.probe_every_s - (self.clock() - self.sent_at))

    def low(self, reserve_tokens: int, reserve_requests: int, need_tokens: int = 0) -> str | None:
        """Why a call needing ``need_tokens`` should be skipped now, or None while budget
        lasts or a probe is due."""
        reason = self._shortage(reserve_tokens, reserve_requests, need_tokens)
        return None if reason is None or self._probe_in() == 0 else reason

    def _shortage(self, reserve_tokens: int, reserve_requests: int, need_tokens: int) -> str | None:
        if (
            self.tokens is not None
            and not self._reset(self.tokens_reset_s)
            and self.tokens < reserve_tokens + need_tokens
        ):
            return (
                f"{self.tokens:.0f} tokens left this minute "
                f"(need {need_tokens} + reserve {reserve_tokens})"
            )
        if (
            self.requests is not None
            and not self._reset(self.requests_reset_s)
            and (self.requests < reserve_requests)
        ):
            return f"{self.requests:.0f} requests left today (reserve {reserve_requests})"
        return None

    def status(self) -> BudgetStatus:
        """The numbers for /stats, their age, and when the next probe may go out."""
        age = None if self.seen_at is None else round(self.clock() - self.seen_at, 3)
        return {
            "next_probe_s": round(self._probe_in(), 3),
            "remaining_tokens_minute": self.tokens,
            "remaining_requests_day": self.requests,
            "limit_tokens_minute": self.tokens_limit,
            "limit_requests_day": self.requests_limit,
            "reset_tokens_s": self.tokens_reset_s,
            "reset_requests_s": self.requests_reset_s,
            "seen_s_ago": age,
        }


def _number(text: str | None) -> float | None:
    """A header's finite number, or None."""
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None
