"""What the cloud's rate-limit headers say is left, and whether to spend it. Pure."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_FIELDS = {
    "x-ratelimit-remaining-tokens-minute": "tokens",
    "x-ratelimit-remaining-requests-day": "requests",
    "x-ratelimit-reset-tokens-minute": "tokens_reset_s",
    "x-ratelimit-reset-requests-day": "requests_reset_s",
    "x-ratelimit-limit-tokens-minute": "tokens_limit",
    "x-ratelimit-limit-requests-day": "requests_limit",
}


@dataclass
class RateBudget:
    """The latest remaining budget the upstream reported, and when it resets."""

    clock: Callable[[], float] = time.monotonic
    tokens: float | None = None
    requests: float | None = None
    tokens_limit: float | None = None
    requests_limit: float | None = None
    tokens_reset_s: float | None = None
    requests_reset_s: float | None = None
    seen_at: float | None = None

    def update(self, headers: Mapping[str, str]) -> None:
        """Take the numbers from a response's headers (missing or bad ones are kept)."""
        found = False
        for header, name in _FIELDS.items():
            try:
                setattr(self, name, float(headers[header]))
                found = True
            except (KeyError, ValueError):
                continue
        if found:
            self.seen_at = self.clock()

    def _reset(self, reset_s: float | None) -> bool:
        """Whether the window the numbers describe has rolled over since they were seen."""
        return self.seen_at is None or (
            reset_s is not None and self.clock() - self.seen_at >= reset_s
        )

    def low(self, reserve_tokens: int, reserve_requests: int, need_tokens: int = 0) -> str | None:
        """Why a call needing ``need_tokens`` should be skipped now, or None while budget lasts."""
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

    def status(self) -> dict[str, Any]:
        age = None if self.seen_at is None else round(self.clock() - self.seen_at, 3)
        return {
            "remaining_tokens_minute": self.tokens,
            "remaining_requests_day": self.requests,
            "limit_tokens_minute": self.tokens_limit,
            "limit_requests_day": self.requests_limit,
            "reset_tokens_s": self.tokens_reset_s,
            "reset_requests_s": self.requests_reset_s,
            "seen_s_ago": age,
        }
