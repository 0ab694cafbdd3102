"""Counters, speculation metrics and latency percentiles, for ``GET /stats``.

The pipeline fills one ``RequestRecord`` per request and hands it over in a
``finally`` block, so every request is counted exactly once, errors included.
Everything runs on the event loop: no locks needed.

This is the one place a finished request is counted: ``/stats`` serves
``get_metrics()`` and ``/metrics`` renders the same ``Stats`` as Prometheus
families (``app.telemetry.metrics``); its tallies (speculation, histograms with their
buckets, percentiles) are in ``app.telemetry.tallies``.

With several worker processes each keeps its own ``Stats``; ``state()`` is one
worker's raw material as JSON data and ``Stats.merged()`` adds several of them
up into one ``Stats`` whose ``get_metrics()`` covers every worker (counters
add, latency samples pool, histogram buckets and per-second buckets add).

Speculation metrics follow seed 003 and count *verified drafts* only (a draft
served without verification has no acceptance to measure):

    acceptance rate        = accepted tokens / drafted tokens
    mean acceptance length = 1 + accepted tokens / drafts
    per-position rate[i]   = drafts accepted at position i / drafts
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import Any

from app.config import AlertConfig
from app.pricing import Charge, Late, shown_usd
from app.record import RequestRecord, routing_events
from app.spend import Spend
from app.telemetry.alerts import alerts
from app.telemetry.by_key import KeyUsage
from app.telemetry.tallies import HISTOGRAMS, Histogram, Speculation, percentiles, ratio
from app.telemetry.windows import WINDOWS, RecentSeconds
from app.vocabulary import Outcome, Strategy

# Outcomes whose answer came from the local model (a speculative request's draft or its
# local continuation)
SERVED_LOCALLY = (Outcome.ACCEPTED, Outcome.VERIFIED_DRAFT_USED, Outcome.DEGRADED)
_SAMPLES = 2048  # latency reservoir per phase: recent requests, bounded memory
# The plain tallies by name: they travel in ``state()`` as they are and add up in ``merged()``
_COUNTERS = (
    "upstream_errors",
    "routing_events",
    "lanes",
    "refused",
    "lost_lines",
    "embeddings",
    "continuations",
)


class Stats:
    """Running totals; ``get_metrics()`` is the snapshot ``/stats`` serves."""

    def __init__(
        self, alerts: AlertConfig | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.alerts = alerts or AlertConfig()
        self._clock = clock
        self.started = clock()
        # One count per request, by (strategy, outcome, context type): /metrics' labels;
        # /stats' tallies by strategy, by outcome and by context are sums of it.
        self.finished: Counter[tuple[str, str, str]] = Counter()
        self.upstream_errors: Counter[str] = Counter()
        self.routing_events: Counter[str] = Counter()  # hedged, ... (app.record.routing_events)
        self.lanes: Counter[str] = Counter()  # speculative requests by the gate's lane
        self.refused: Counter[str] = Counter()  # by status, before reaching the pipeline
        self.lost_lines: Counter[str] = Counter()  # by sink: lines a log could not write
        self.streams = 0
        self.tokens_local = 0
        self.tokens_cloud = 0
        self.speculation = Speculation()
        self.speculation_by_context: dict[str, Speculation] = defaultdict(Speculation)
        self.histograms = {name: Histogram(bounds) for name, bounds in HISTOGRAMS.items()}
        self.spend = Spend()
        self.verified = [0, 0]  # verified drafts judged, and those that disagreed (not audits)
        self.cache: Counter[str] = Counter()  # hit, miss, bypass (app.cache)
        self.cache_saved_usd = 0.0  # what the hits would have cost the cloud (their baseline)
        # POST /v1/embeddings: requests, inputs, tokens, errors (not in ``finished``: no
        # strategy serves them); their cost is charged with purpose ``embeddings``
        self.embeddings: Counter[str] = Counter()
        self.continuations: Counter[str] = Counter()  # broken streams continued, by continuer
        self.keys = KeyUsage()  # by key and team (app.telemetry.by_key)
        self.recent = RecentSeconds()
        self._latency: dict[str, deque[float]] = {
            phase: deque(maxlen=_SAMPLES) for phase in ("draft", "verify", "total", "first_token")
        }

    def record(self, rec: RequestRecord) -> None:
        """Count one finished request."""
        now = self._clock()
        self.finished[rec.strategy.value, rec.outcome.value, rec.context_type] += 1
        self.streams += rec.stream
        self.tokens_local += rec.local_tokens
        self.tokens_cloud += rec.cloud_tokens
        if rec.similarity is not None:
            self.histograms["similarity"].observe(rec.similarity)
        if rec.agreement is not None and not rec.audit:
            self.verified[0] += 1
            self.verified[1] += not rec.agreement
        if rec.acceptance is not None:
            self.speculation.add(rec.acceptance)
            self.speculation_by_context[rec.context_type].add(rec.acceptance)
        for phase, value in (
            ("draft", rec.draft_s),
            ("verify", rec.verify_s),
            ("total", rec.total_s),
            ("first_token", rec.first_token_s),
        ):
            if value is not None:
                self._latency[phase].append(value)
                self.histograms[phase].observe(value)
        for upstream, kind in rec.upstream_errors:
            self.upstream_errors[f"{upstream}:{kind}"] += 1
        self.routing_events.update(routing_events(rec))
        if rec.lane is not None:
            self.lanes[rec.lane] += 1
        if rec.continued_by is not None:
            self.continuations[rec.continued_by] += 1
        if rec.cache is not None:
            self.cache[rec.cache] += 1
            if rec.cache == "hit" and rec.bill is not None:
                self.cache_saved_usd += rec.bill.baseline_usd - rec.bill.spend_usd
        bucket = self.recent.at(now)
        if rec.bill is not None:
            self.spend.add(rec.bill)
            bucket.spend.add(rec.bill)
        self.keys.record(rec)
        bucket.requests += 1
        bucket.speculative += rec.strategy is Strategy.SPECULATIVE
        bucket.spilled += rec.outcome is Outcome.SPILLED_OVER
        if rec.acceptance is not None:
            bucket.speculation.add(rec.acceptance)

    def embedded(self, inputs: int, tokens: int, charge: Charge | None) -> None:
        """Count one embeddings request (``charge``: its cost; None: it failed)."""
        self.embeddings["requests"] += 1
        self.embeddings["inputs"] += inputs
        self.embeddings["tokens"] += tokens
        if charge is None:
            self.embeddings["errors"] += 1
        else:
            self.charge(Late(charges=(charge,)))

    def charge(self, late: Late) -> None:
        """Count what a request already counted spent later (an audit, a draft beside the
        cloud's answer), in this second; its pair, if new, for the baseline's calibration."""
        bucket = self.recent.at(self._clock())
        for charge in late.charges:
            self.spend.add_charge(charge)
            bucket.spend.add_charge(charge)
        for usage in late.usages:
            if usage.side(late.draft_model) == "local":
                self.tokens_local += usage.completion_tokens
            else:
                self.tokens_cloud += usage.completion_tokens
        self.keys.charge(late)
        if late.pair is not None:
            self.spend.calibration.add(late.pair)

    def state(self) -> dict[str, Any]:
        """Everything ``get_metrics()`` derives from, as JSON data that ``merged()`` adds up."""
        self.recent.trim(self._clock())  # seconds past the longest window need not travel
        return {
            "started": self.started,
            "finished": [[*key, n] for key, n in self.finished.items()],
            **{name: dict(getattr(self, name)) for name in _COUNTERS},
            "streams": self.streams,
            "tokens": [self.tokens_local, self.tokens_cloud],
            "speculation": asdict(self.speculation),
            "speculation_by_context": {
                kind: asdict(spec) for kind, spec in self.speculation_by_context.items()
            },
            "histograms": {name: [list(h.counts), h.total] for name, h in self.histograms.items()},
            "spend": self.spend.state(),
            "verified": list(self.verified),
            "cache": [dict(self.cache), self.cache_saved_usd],
            "keys": self.keys.state(),
            "seconds": self.recent.state(),
            "latency": {phase: list(samples) for phase, samples in self._latency.items()},
        }

    @classmethod
    def merged(
        cls,
        states: Iterable[Mapping[str, Any]],
        alerts: AlertConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> Stats:
        """One ``Stats`` holding several workers' ``state()`` added up, for ``get_metrics()``.

        Started is the earliest start (the monotonic clock is shared by the
        processes of one machine). Latency samples are pooled without a bound,
        so percentiles are over every worker's recent requests.
        """
        total = cls(alerts, clock)
        total._latency = {phase: deque() for phase in total._latency}
        starts, seconds = [], []
        for state in states:
            starts.append(state["started"])
            total.finished.update({(s, o, c): n for s, o, c, n in state["finished"]})
            for name in _COUNTERS:
                getattr(total, name).update(state.get(name, {}))
            total.streams += state["streams"]
            total.tokens_local += state["tokens"][0]
            total.tokens_cloud += state["tokens"][1]
            total.speculation.merge(Speculation(**state["speculation"]))
            for kind, spec in state["speculation_by_context"].items():
                total.speculation_by_context[kind].merge(Speculation(**spec))
            for name, (counts, summed) in state["histograms"].items():
                total.histograms[name].merge(counts, summed)
            total.spend.merge(Spend.from_state(state["spend"]))
            total.verified = [a + b for a, b in zip(total.verified, state["verified"], strict=True)]
            cache, saved = state.get("cache", [{}, 0.0])
            total.cache.update(cache)
            total.cache_saved_usd += saved
            total.keys.merge(state.get("keys", {}))
            seconds.append(state["seconds"])
            for phase, samples in state["latency"].items():
                total._latency[phase].extend(samples)
        total.started = min(starts, default=total.started)
        total.recent = RecentSeconds.merged(seconds)
        return total

    def get_metrics(self) -> dict[str, Any]:
        """The whole snapshot as plain JSON data: counters, speculation, windows, alerts."""
        now = self._clock()
        self.recent.trim(now)
        uptime = max(now - self.started, 1e-9)
        by_strategy, by_outcome, by_context = self._tallies()
        speculative = by_strategy[Strategy.SPECULATIVE.value]
        spilled = by_outcome[Outcome.SPILLED_OVER.value]
        similarity = self.histograms["similarity"]
        windows = {
            name: self.recent.window(seconds, now, self.started, self.spend.calibration)
            for name, seconds in WINDOWS.items()
        }
        window_costs = {name: window.pop("cost") for name, window in windows.items()}
        spill_rate = ratio(spilled, speculative)
        return {
            "uptime_s": round(uptime, 3),
            "requests": {
                "total": sum(by_strategy.values()),
                "streaming": self.streams,
                "by_strategy": dict(by_strategy),
                "by_outcome": dict(by_outcome),
                "errors": by_outcome[Outcome.ERROR.value],
                "refused": dict(self.refused),
            },
            "lost_log_lines": dict(self.lost_lines),  # by log: written nowhere
            "spill_over_rate": spill_rate,
            "mean_similarity": round(similarity.total / n, 4) if (n := similarity.n) else None,
            "tokens": {"local": self.tokens_local, "cloud": self.tokens_cloud},
            "cost": {
                **self.spend.summary(),
                "windows": window_costs,
            },
            "quality": self._quality(speculative, by_outcome),
            "speculation": self.speculation.summary(uptime),
            "windows": windows,
            "by_context_type": {
                kind: {**counts, **self.speculation_by_context[kind].summary()}
                for kind, counts in sorted(by_context.items())
            },
            "alerts": alerts(self.alerts, windows),
            "latency_ms": {phase: percentiles(v) for phase, v in self._latency.items()},
            "upstream_errors": dict(self.upstream_errors),
            "routing_events": dict(self.routing_events),
            "lanes": dict(self.lanes),  # speculative requests by the gate's lane (docs/gate.md)
            "cache": self.cache_summary(),
            "embeddings": {
                k: self.embeddings[k] for k in ("requests", "inputs", "tokens", "errors")
            },
            # streams that broke mid-answer and were continued (app.upstreams.continuation)
            "continuations": {
                "total": sum(self.continuations.values()),
                "by_upstream": dict(self.continuations),
            },
            "keys": self.keys.summary(self.spend.calibration),
        }

    def cache_summary(self) -> dict[str, Any]:
        """``/stats`` → ``cache``'s counts (entries and bytes are the store's: the route's)."""
        hits, misses = self.cache["hit"], self.cache["miss"]
        return {
            "hits": hits,
            "misses": misses,
            "bypass": self.cache["bypass"],
            "hit_rate": ratio(hits, hits + misses),
            "saved_usd": shown_usd(self.cache_saved_usd),
        }

    def _tallies(self) -> tuple[Counter[str], Counter[str], dict[str, Counter[str]]]:
        """Requests by strategy, by outcome, and by context type (``requests`` and each
        outcome), summed from the one count per request."""
        by_strategy: Counter[str] = Counter()
        by_outcome: Counter[str] = Counter()
        by_context: dict[str, Counter[str]] = defaultdict(Counter)
        for (strategy, outcome, context), n in self.finished.items():
            by_strategy[strategy] += n
            by_outcome[outcome] += n
            counts = by_context[context]
            counts["requests"] += n
            counts[outcome] += n
        return by_strategy, by_outcome, by_context

    def _quality(self, speculative: int, by_outcome: Counter[str]) -> dict[str, Any]:
        """How good what was served is, as far as verifications show (audits: /stats adds)."""
        local = sum(by_outcome[o.value] for o in SERVED_LOCALLY)
        judged, disagreed = self.verified
        return {
            "served_locally": local,
            "served_locally_share": ratio(local, speculative),
            "verified_drafts": judged,
            "verified_disagreed": disagreed,
            "verified_disagreed_rate": ratio(disagreed, judged),
        }
