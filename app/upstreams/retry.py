"""When to retry a cloud call, and how long to wait first. Pure."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_RESET_HEADERS = ("x-ratelimit-reset-tokens-minute", "x-ratelimit-reset-requests-day")


def upstream_wait(headers: Mapping[str, str], *, rate_limited: bool = False) -> float | None:
    """Seconds the upstream asked us to wait: retry-after(-ms), or on a 429 the reset headers."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return max(0.0, float(headers[name]) * scale)
        except (KeyError, ValueError):
            continue
    for name in _RESET_HEADERS if rate_limited else ():
        try:
            return max(0.0, float(headers[name]))
        except (KeyError, ValueError):
            continue
    return None


def retry_delay(
    attempt: int,
    status: int | None,
    headers: Mapping[str, str],
    remaining_s: float,
    *,
    max_wait_s: float = 2.0,
    base_s: float = 0.25,
    jitter: Callable[[float, float], float] = random.uniform,
) -> float | None:
    """Seconds to wait before retry number ``attempt + 1``, or None not to retry.

    ``status`` None means the connection failed. Only 408/429/5xx and connection
    errors are retried, and only when the wait is at most ``max_wait_s`` and fits
    in the time budget left: a fallback answer now beats a long wait.
    """
    if status is not None and status not in RETRY_STATUSES:
        return None
    asked = upstream_wait(headers, rate_limited=status == 429) if status in (429, 503) else None
    delay = asked if asked is not None else jitter(0, base_s * 2**attempt)
    return delay if delay <= max_wait_s and delay < remaining_s else None
