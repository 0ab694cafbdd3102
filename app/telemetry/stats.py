"""Counters, speculation metrics and latency percentiles, for ``GET /stats``.

The pipeline fills one ``RequestRecord`` per request and hands it over in a
``finally`` block, so every request is counted exactly once, errors included.
Everything runs on the event loop: no locks needed.

Speculation metrics follow seed 003 and count *verified drafts* only (a draft
served without verification has no acceptance to measure):

    acceptance rate        = accepted tokens / drafted tokens
    mean acceptance length = 1 + accepted tokens / drafts
    per-position rate[i]   = drafts accepted at position i / drafts
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.config import AlertConfig, Strategy
from app.routing.acceptance import Acceptance
from app.routing.signals import DraftSignals


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
    request_id: str = "-"
    context_type: str = "prose"
    draft_model: str | None = None
    verify_model: str | None = None
    outcome: Outcome = Outcome.ERROR
    reasons: list[str] = field(default_factory=list)
    decision_reasons: tuple[str, ...] = ()
    draft: DraftSignals | None = None
    acceptance: Acceptance | None = None
    similarity: float | None = None
    prompt_tokens: int = 0
    draft_tokens: int = 0
    verified_tokens: int = 0
    server_spec: dict[str, int] | None = None  # llama-server's own draft_n / draft_n_accepted
    draft_s: float | None = None
    verify_s: float | None = None
    total_s: float | None = None
    upstream_errors: list[tuple[str, int]] = field(default_factory=list)
    prompt: str | None = None  # kept only when the spec log records content
    verified_text: str | None = None


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

    def summary(self, seconds: float | None = None) -> dict[str, Any]:
        """Seed 003's derived metrics; throughput when the span in seconds is known."""
        d = self.drafts
        out: dict[str, Any] = {
            "num_drafts": d,
            "num_draft_tokens": self.draft_tokens,
            "num_accepted_tokens": self.accepted_tokens,
            "num_accepted_tokens_per_pos": list(self.accepted_per_pos),
            "acceptance_rate": _ratio(self.accepted_tokens, self.draft_tokens),
            "mean_acceptance_length": round(1 + self.accepted_tokens / d, 4) if d else None,
            "per_position_acceptance_rate": [round(a / d, 4) for a in self.accepted_per_pos]
            if d
            else [],
        }
        if seconds:
            out["draft_tokens_per_s"] = round(self.draft_tokens / seconds, 3)
            out["accepted_tokens_per_s"] = round(self.accepted_tokens / seconds, 3)
        return out


def _bump(counts: list[int], n: int) -> None:
    """Add one to positions 0..n-1, growing the list as needed."""
    if len(counts) < n:
        counts.extend([0] * (n - len(counts)))
    for i in range(n):
        counts[i] += 1


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


@dataclass(frozen=True, slots=True)
class _Event:
    at: float
    speculative: bool
    spilled: bool
    acceptance: Acceptance | None


WINDOWS = {"30s": 30.0, "5m": 300.0}
_SAMPLES = 2048  # latency reservoir per phase: recent requests, bounded memory


class Stats:
    """Running totals; ``get_metrics()`` is the snapshot ``/stats`` serves."""

    def __init__(
        self, alerts: AlertConfig | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.alerts = alerts or AlertConfig()
        self._clock = clock
        self.started = clock()
        self.by_strategy: Counter[str] = Counter()
        self.by_outcome: Counter[str] = Counter()
        self.upstream_errors: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()  # by status, before reaching the pipeline
        self.streams = 0
        self.tokens_drafted = 0
        self.tokens_verified = 0
        self.speculation = Speculation()
        self.by_context: dict[str, Counter[str]] = defaultdict(Counter)
        self.speculation_by_context: dict[str, Speculation] = defaultdict(Speculation)
        self._similarity_sum = 0.0
        self._similarity_n = 0
        self._events: deque[_Event] = deque()
        self._latency: dict[str, deque[float]] = {
            phase: deque(maxlen=_SAMPLES) for phase in ("draft", "verify", "total")
        }

    def record(self, rec: RequestRecord) -> None:
        """Count one finished request."""
        now = self._clock()
        self.by_strategy[rec.strategy.value] += 1
        self.by_outcome[rec.outcome.value] += 1
        self.streams += rec.stream
        self.tokens_drafted += rec.draft_tokens
        self.tokens_verified += rec.verified_tokens
        context = self.by_context[rec.context_type]
        context["requests"] += 1
        context[rec.outcome.value] += 1
        if rec.similarity is not None:
            self._similarity_sum += rec.similarity
            self._similarity_n += 1
        if rec.acceptance is not None:
            self.speculation.add(rec.acceptance)
            self.speculation_by_context[rec.context_type].add(rec.acceptance)
        for phase, value in (
            ("draft", rec.draft_s),
            ("verify", rec.verify_s),
            ("total", rec.total_s),
        ):
            if value is not None:
                self._latency[phase].append(value)
        for upstream, status in rec.upstream_errors:
            self.upstream_errors[f"{upstream}:{status}"] += 1
        speculative = rec.strategy is Strategy.SPECULATIVE
        self._events.append(
            _Event(now, speculative, rec.outcome is Outcome.SPILLED_OVER, rec.acceptance)
        )
        self._trim(now)

    def _trim(self, now: float) -> None:
        horizon = now - max(WINDOWS.values())
        while self._events and self._events[0].at < horizon:
            self._events.popleft()

    def _window(self, seconds: float, now: float) -> dict[str, Any]:
        recent = [e for e in self._events if e.at >= now - seconds]
        span = min(seconds, max(now - self.started, 1e-9))
        speculation = _speculation_of(e.acceptance for e in recent)
        speculative = sum(e.speculative for e in recent)
        return {
            "requests": len(recent),
            "spill_over_rate": _ratio(sum(e.spilled for e in recent), speculative),
            **speculation.summary(span),
        }

    def get_metrics(self) -> dict[str, Any]:
        """The whole snapshot as plain JSON data: counters, speculation, windows, alerts."""
        now = self._clock()
        self._trim(now)
        uptime = max(now - self.started, 1e-9)
        speculative = self.by_strategy[Strategy.SPECULATIVE.value]
        spilled = self.by_outcome[Outcome.SPILLED_OVER.value]
        windows = {name: self._window(seconds, now) for name, seconds in WINDOWS.items()}
        spill_rate = _ratio(spilled, speculative)
        return {
            "uptime_s": round(uptime, 3),
            "requests": {
                "total": sum(self.by_strategy.values()),
                "streaming": self.streams,
                "by_strategy": dict(self.by_strategy),
                "by_outcome": dict(self.by_outcome),
                "errors": self.by_outcome[Outcome.ERROR.value],
                "refused": dict(self.refused),
            },
            "spill_over_rate": spill_rate,
            "mean_similarity": (
                round(self._similarity_sum / self._similarity_n, 4) if self._similarity_n else None
            ),
            "tokens": {"drafted": self.tokens_drafted, "verified": self.tokens_verified},
            "speculation": self.speculation.summary(uptime),
            "windows": windows,
            "by_context_type": {
                kind: {**counts, **self.speculation_by_context[kind].summary()}
                for kind, counts in sorted(self.by_context.items())
            },
            "alerts": self._alerts(windows),
            "latency_ms": {phase: _percentiles(v) for phase, v in self._latency.items()},
            "upstream_errors": dict(self.upstream_errors),
        }

    def _alerts(self, windows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """Health flags: acceptance over 5 minutes, spill-over rate of 30 s against 5 minutes."""
        a, slow, fast = self.alerts, windows["5m"], windows["30s"]
        found = []
        if slow["num_drafts"] >= a.min_drafts:
            rate, length = slow["acceptance_rate"], slow["mean_acceptance_length"]
            if rate < a.min_acceptance_rate:
                found.append(_alert("low_acceptance_rate", rate, a.min_acceptance_rate))
            if length < a.min_acceptance_length:
                found.append(_alert("speculation_not_paying", length, a.min_acceptance_length))
        if fast["requests"] >= a.min_drafts and None not in (
            fast["spill_over_rate"],
            slow["spill_over_rate"],
        ):
            jump = fast["spill_over_rate"] - slow["spill_over_rate"]
            if jump > a.spill_rate_jump:
                found.append(_alert("spill_over_rate_jump", round(jump, 4), a.spill_rate_jump))
        return found


def _alert(name: str, value: float, threshold: float) -> dict[str, Any]:
    return {"alert": name, "value": value, "threshold": threshold}


def _speculation_of(acceptances: Iterable[Acceptance | None]) -> Speculation:
    speculation = Speculation()
    for acceptance in acceptances:
        if acceptance is not None:
            speculation.add(acceptance)
    return speculation


def _percentiles(samples: deque[float]) -> dict[str, float | int | None]:
    if not samples:
        return {"n": 0, "p50": None, "p95": None}
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"n": len(ordered), "p50": at(0.50), "p95": at(0.95)}
