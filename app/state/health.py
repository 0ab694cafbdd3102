"""Whether Redis answers, for /stats, with one log line per outage rather than per call.

The sync task (event loop) and the learner's store (a worker thread) each keep one,
named by what they share, so each outage is logged once per part.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("specproxy.state")


class RedisHealth:
    """Whether Redis answered the last call, with one log line per outage (any thread)."""

    def __init__(self, secrets: list[str], purpose: str) -> None:
        self.purpose = purpose  # named in the log lines: which part lost Redis
        self._secrets = [s for s in secrets if s]
        self._lock = threading.Lock()
        self.error: str | None = None
        self.down_since: float | None = None
        self.last_ok: float | None = None

    @property
    def connected(self) -> bool:
        return self.error is None and self.last_ok is not None

    def ok(self) -> None:
        """A call succeeded (the first after an outage logs the recovery)."""
        with self._lock:
            if self.error is not None:
                log.warning(
                    "redis is back for %s after %.1f s",
                    self.purpose,
                    time.time() - (self.down_since or time.time()),
                )
            self.error, self.down_since, self.last_ok = None, None, time.time()

    def failed(self, exc: BaseException) -> None:
        """A call failed (the first of an outage logs it)."""
        text = f"{type(exc).__name__}: {exc}"
        for secret in self._secrets:
            text = text.replace(secret, "***")
        with self._lock:
            first = self.error is None
            self.error = text
            if first:
                self.down_since = time.time()
                log.warning(
                    "redis unreachable for %s (%s): this replica carries on with its own",
                    self.purpose,
                    text,
                )

    def status(self) -> dict[str, Any]:
        """/stats → state.redis."""
        return {
            "connected": self.connected,
            "error": self.error,
            "down_since": self.down_since,
            "last_ok": self.last_ok,
        }
