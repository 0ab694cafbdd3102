"""Counters and latency percentiles since start, for ``GET /stats``.

The pipeline fills one ``RequestRecord`` per request and hands it over in a
``finally`` block, so every request is counted exactly once, errors included.
Everything runs on the event loop: no locks needed.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.config import Strategy


class Outcome(StrEnum):
    """How a request ended."""

    ACCEPTED = "accepted_without_verification"
    VERIFIED_DRAFT_USED = "verified_draft_used"
    SPILLED_OVER = "spilled_over"
    DEGRADED = "degraded"
    LOCAL_DOWN_CLOUD_USED = "local_down_cloud_used"
    PASSED_THROUGH = "passed_through"
    CLIENT_ERROR = "client_error"
    ERROR = "error"


@dataclass(slots=True)
class RequestRecord:
    """What one request did, filled in as it goes."""

    strategy: Strategy
    stream: bool = False
    outcome: Outcome = Outcome.ERROR
    similarity: float | None = None
    draft_tokens: int = 0
    verified_tokens: int = 0
    draft_s: float | None = None
    verify_s: float | None = None
    total_s: float | None = None
    upstream_errors: list[tuple[str, int]] = field(default_factory=list)


_SAMPLES = 2048  # latency reservoir per phase: recent requests, bounded memory


class Stats:
    """Running totals; ``snapshot()`` is the JSON ``/stats`` serves."""

    def __init__(self) -> None:
        self.started = time.time()
        self.by_strategy: Counter[str] = Counter()
        self.by_outcome: Counter[str] = Counter()
        self.upstream_errors: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()  # by status, before reaching the pipeline
        self.streams = 0
        self.tokens_drafted = 0
        self.tokens_verified = 0
        self._similarity_sum = 0.0
        self._similarity_n = 0
        self._latency: dict[str, deque[float]] = {
            phase: deque(maxlen=_SAMPLES) for phase in ("draft", "verify", "total")
        }

    def record(self, rec: RequestRecord) -> None:
        """Count one finished request."""
        self.by_strategy[rec.strategy.value] += 1
        self.by_outcome[rec.outcome.value] += 1
        self.streams += rec.stream
        self.tokens_drafted += rec.draft_tokens
        self.tokens_verified += rec.verified_tokens
        if rec.similarity is not None:
            self._similarity_sum += rec.similarity
            self._similarity_n += 1
        for phase, value in (
            ("draft", rec.draft_s),
            ("verify", rec.verify_s),
            ("total", rec.total_s),
        ):
            if value is not None:
                self._latency[phase].append(value)
        for upstream, status in rec.upstream_errors:
            self.upstream_errors[f"{upstream}:{status}"] += 1

    def snapshot(self) -> dict[str, Any]:
        """Counters, rates and latency percentiles as plain JSON data."""
        speculative = self.by_strategy[Strategy.SPECULATIVE.value]
        spilled = self.by_outcome[Outcome.SPILLED_OVER.value]
        return {
            "uptime_s": round(time.time() - self.started, 3),
            "requests": {
                "total": sum(self.by_strategy.values()),
                "streaming": self.streams,
                "by_strategy": dict(self.by_strategy),
                "by_outcome": dict(self.by_outcome),
                "errors": self.by_outcome[Outcome.ERROR.value],
                "refused": dict(self.refused),
            },
            "spill_over_rate": round(spilled / speculative, 4) if speculative else None,
            "mean_similarity": (
                round(self._similarity_sum / self._similarity_n, 4) if self._similarity_n else None
            ),
            "tokens": {"drafted": self.tokens_drafted, "verified": self.tokens_verified},
            "latency_ms": {phase: _percentiles(v) for phase, v in self._latency.items()},
            "upstream_errors": dict(self.upstream_errors),
        }


def _percentiles(samples: deque[float]) -> dict[str, float | int | None]:
    if not samples:
        return {"n": 0, "p50": None, "p95": None}
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"n": len(ordered), "p50": at(0.50), "p95": at(0.95)}
