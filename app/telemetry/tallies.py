"""The tallies ``Stats`` keeps and merges across workers: speculation (seed 003's
acceptance figures), histograms with fixed buckets (``/metrics`` renders them), and
nearest-rank percentiles of latency samples."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.routing.acceptance import Acceptance


@dataclass(slots=True)
class Speculation:
    """Acceptance counters over a set of verified drafts."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    drafted_per_pos: list[int] = field(default_factory=list)
    accepted_per_pos: list[int] = field(default_factory=list)

    def add(self, acceptance: Acceptance) -> None:
        self.drafts += 1
        self.draft_tokens += acceptance.n_drafted
        self.accepted_tokens += acceptance.n_accepted
        _bump(self.drafted_per_pos, acceptance.n_drafted)
        _bump(self.accepted_per_pos, acceptance.n_accepted)

    def merge(self, other: Speculation) -> None:
        self.drafts += other.drafts
        self.draft_tokens += other.draft_tokens
        self.accepted_tokens += other.accepted_tokens
        for mine, theirs in (
            (self.drafted_per_pos, other.drafted_per_pos),
            (self.accepted_per_pos, other.accepted_per_pos),
        ):
            if len(mine) < len(theirs):
                mine.extend([0] * (len(theirs) - len(mine)))
            for i, n in enumerate(theirs):
                mine[i] += n

    def summary(self, seconds: float | None = None) -> dict[str, Any]:
        """Seed 003's derived metrics; throughput when the span in seconds is known."""
        d = self.drafts
        width = len(self.drafted_per_pos)  # every drafted position, accepted or not
        accepted = self.accepted_per_pos + [0] * (width - len(self.accepted_per_pos))
        out: dict[str, Any] = {
            "num_drafts": d,
            "num_draft_tokens": self.draft_tokens,
            "num_accepted_tokens": self.accepted_tokens,
            "num_drafted_tokens_per_pos": list(self.drafted_per_pos),
            "num_accepted_tokens_per_pos": accepted,
            "acceptance_rate": ratio(self.accepted_tokens, self.draft_tokens),
            "mean_acceptance_length": round(1 + self.accepted_tokens / d, 4) if d else None,
            "per_position_acceptance_rate": [round(a / d, 4) for a in accepted] if d else [],
        }
        if seconds:
            out["draft_tokens_per_s"] = round(self.draft_tokens / seconds, 3)
            out["accepted_tokens_per_s"] = round(self.accepted_tokens / seconds, 3)
        return out


# Upper bounds (inclusive, as Prometheus' ``le``) of the histograms /metrics exposes.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SIMILARITY_BUCKETS = tuple(round(0.1 * i, 1) for i in range(1, 11))
HISTOGRAMS = {
    "draft": LATENCY_BUCKETS,
    "verify": LATENCY_BUCKETS,
    "total": LATENCY_BUCKETS,
    "first_token": LATENCY_BUCKETS,
    "similarity": SIMILARITY_BUCKETS,
}


@dataclass(slots=True)
class Histogram:
    """Observations in buckets (not cumulative; the last is +Inf) and their sum: what
    ``/metrics`` renders as ``_bucket``, ``_sum`` and ``_count``, a few ints per phase."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Count one value in the first bucket whose bound is at least the value."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def n(self) -> int:
        """How many values were observed."""
        return sum(self.counts)

    def merge(self, counts: Sequence[int], total: float) -> None:
        """Add another worker's ``[counts, total]`` (same bounds, or ValueError)."""
        self.counts = [a + b for a, b in zip(self.counts, counts, strict=True)]
        self.total += total


def _bump(counts: list[int], n: int) -> None:
    """Add one to positions 0..n-1, growing the list as needed."""
    if len(counts) < n:
        counts.extend([0] * (n - len(counts)))
    for i in range(n):
        counts[i] += 1


def ratio(a: float, b: float) -> float | None:
    """``a / b`` to four places; None when ``b`` is 0."""
    return round(a / b, 4) if b else None


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted samples by the nearest-rank method (p50 of [1, 2] is 1)."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def percentiles(samples: deque[float]) -> dict[str, float | int | None]:
    """p50/p95 in ms of the recent samples (``n`` is at most the reservoir size)."""
    if not samples:
        return {"n": 0, "p50": None, "p95": None}
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50": round(1000 * nearest_rank(ordered, 0.50), 3),
        "p95": round(1000 * nearest_rank(ordered, 0.95), 3),
    }
