"""Prometheus metrics for ``GET /metrics``: the proxy's own, plus llama-server's re-exported.

The acceptance counters follow seed 003 with the same definitions as ``/stats``
(``Speculation``): only verified drafts (``rec.acceptance is not None``) count,
and a draft accepted up to ``n_accepted`` bumps positions ``0..n_accepted-1``.
So the PromQL of the derived metrics reads like the seed:

    acceptance rate        = rate(specproxy_num_accepted_tokens_total[5m])
                             / rate(specproxy_num_draft_tokens_total[5m])
    mean acceptance length = 1 + rate(specproxy_num_accepted_tokens_total[5m])
                                 / rate(specproxy_num_drafts_total[5m])
    per-position rate[i]   = rate(specproxy_num_accepted_tokens_per_pos_total{position="i"}[5m])
                             / rate(specproxy_num_drafts_total[5m])

llama-server's own ``llamacpp:*`` samples are re-exposed as gauges named
``specproxy_llamacpp_*``: they are another process's readings taken at scrape
time (reset when it restarts), so one scrape of the proxy shows both sides.

With several workers (``--workers N``) prometheus_client runs in its
multiprocess mode: the supervisor sets ``PROMETHEUS_MULTIPROC_DIR`` before the
workers start, each worker's counters and histograms live in files there, and
a scrape adds up every file (a worker that died still counts: its files stay).
The live gauges are not multiprocess ``Gauge``s: the answering worker asks its
peers (``app.telemetry.workers``) at scrape time, so nothing extra happens per
request. ``specproxy_requests_in_flight`` and ``specproxy_upstream_queued`` are
summed over the workers; circuit state, times opened and rate budget belong to
each worker's own breaker and budget, so they carry a ``worker`` label (pid).
"""

from __future__ import annotations

import logging
import os
from collections import Counter as Tally
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from app.pricing import Charge
from app.record import RequestRecord, routing_events
from app.telemetry.llamacpp import LlamaCppMetrics
from app.vocabulary import Outcome

log = logging.getLogger("specproxy.metrics")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SIMILARITY_BUCKETS = tuple(round(0.1 * i, 1) for i in range(1, 11))
# generate_latest writes the classic text format; without Accept negotiation
# that is what the content type must announce (not prometheus_client's LATEST).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


class Metrics:
    """The proxy's Prometheus metrics in a registry of its own (never the global one).

    ``multiprocess_dir``: one of several workers; scrapes read every worker's
    files there (``render``). prometheus_client picks its file-backed
    values at import time, so the directory must already be in the environment.
    """

    def __init__(self, multiprocess_dir: Path | None = None) -> None:
        self.shared: CollectorRegistry | None = None
        if multiprocess_dir is not None:
            if os.environ.get("PROMETHEUS_MULTIPROC_DIR") != str(multiprocess_dir):
                raise RuntimeError(
                    f"PROMETHEUS_MULTIPROC_DIR must be {multiprocess_dir} before prometheus_client "
                    "is imported, or the workers' counts would not add up"
                )
            self.shared = CollectorRegistry()
            MultiProcessCollector(self.shared, path=str(multiprocess_dir))
        self.registry = CollectorRegistry()
        r = self.registry
        self.num_drafts = Counter(
            "specproxy_num_drafts", "Verified drafts (seed 003 num_drafts)", registry=r
        )
        self.num_draft_tokens = Counter(
            "specproxy_num_draft_tokens", "Tokens in verified drafts", registry=r
        )
        self.num_accepted_tokens = Counter(
            "specproxy_num_accepted_tokens",
            "Draft tokens the verifier agreed with (accepted prefix)",
            registry=r,
        )
        self.num_accepted_tokens_per_pos = Counter(
            "specproxy_num_accepted_tokens_per_pos",
            "Verified drafts accepted at each draft position (0-based)",
            ["position"],
            registry=r,
        )
        self.requests = Counter(
            "specproxy_requests",
            "Finished chat requests",
            ["strategy", "outcome", "context_type"],
            registry=r,
        )
        self.spill_overs = Counter(
            "specproxy_spill_overs", "Requests answered by the cloud after a draft", registry=r
        )
        self.upstream_errors = Counter(
            "specproxy_upstream_errors",
            "Failed upstream calls: HTTP status, or timeout/unavailable/busy/protocol/stream",
            ["upstream", "kind"],
            registry=r,
        )
        self.refused = Counter(
            "specproxy_requests_refused",
            "Requests refused before they reached a strategy (auth, size, bad JSON), by status",
            ["status"],
            registry=r,
        )
        self.lost_lines = Counter(
            "specproxy_log_lines_lost",
            "Lines a log could not write (directory gone, disk full), by log",
            ["log"],
            registry=r,
        )
        self.routing_events = Counter(
            "specproxy_routing_events",
            "Requests hedged (cloud called with the draft), answered cloud-first, streamed "
            "past the first-token budget, waited for as trusted there, aborted early",
            ["event"],
            registry=r,
        )
        tokens = Counter(
            "specproxy_tokens",
            "Completion tokens by where they were generated",
            ["source"],
            registry=r,
        )
        self._local_tokens = tokens.labels("local")
        self._cloud_tokens = tokens.labels("cloud")
        self.cost = Counter(
            "specproxy_cost_usd",
            "Spend in USD by model and purpose (draft, verification, spill, hedge, "
            "hedge_cancelled, audit, pass_through), at models.NAME.price",
            ["model", "purpose"],
            registry=r,
        )
        self.baseline_cost = Counter(
            "specproxy_baseline_cost_usd",
            "What the same requests would have cost sent to the verify model alone",
            registry=r,
        )
        self.draft_latency = Histogram(
            "specproxy_draft_latency_seconds",
            "Local draft (or local answer) latency",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.verify_latency = Histogram(
            "specproxy_verify_latency_seconds",
            "Cloud verification (or cloud answer) latency",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.request_latency = Histogram(
            "specproxy_request_latency_seconds",
            "Whole request latency, to the last byte for streams",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.first_token_latency = Histogram(
            "specproxy_time_to_first_token_seconds",
            "Streams: time to the first content (or tool-call) delta on its way to the client",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.draft_similarity = Histogram(
            "specproxy_draft_similarity",
            "Similarity of a verified draft to the verified answer",
            buckets=SIMILARITY_BUCKETS,
            registry=r,
        )
        # Per-position children, cached: observe() stays a few increments.
        self._per_pos: list[Counter] = []

    def observe(self, rec: RequestRecord) -> None:
        """Count one finished request (increments and observations only, no I/O)."""
        self.requests.labels(rec.strategy.value, rec.outcome.value, rec.context_type).inc()
        if rec.outcome is Outcome.SPILLED_OVER:
            self.spill_overs.inc()
        for upstream, kind in rec.upstream_errors:
            self.upstream_errors.labels(upstream, kind).inc()
        for name in routing_events(rec):
            self.routing_events.labels(name).inc()
        if rec.local_tokens > 0:
            self._local_tokens.inc(rec.local_tokens)
        if rec.cloud_tokens > 0:
            self._cloud_tokens.inc(rec.cloud_tokens)
        if rec.bill is not None:
            self.charge(rec.bill.charges)
            self.baseline_cost.inc(rec.bill.baseline_usd)
        for histogram, value in (
            (self.draft_latency, rec.draft_s),
            (self.verify_latency, rec.verify_s),
            (self.request_latency, rec.total_s),
            (self.first_token_latency, rec.first_token_s),
            (self.draft_similarity, rec.similarity),
        ):
            if value is not None:
                histogram.observe(value)
        acceptance = rec.acceptance
        if acceptance is None:
            return
        self.num_drafts.inc()
        self.num_draft_tokens.inc(max(acceptance.n_drafted, 0))
        self.num_accepted_tokens.inc(max(acceptance.n_accepted, 0))
        self._grow_positions(max(acceptance.n_drafted, acceptance.n_accepted))
        for child in self._per_pos[: acceptance.n_accepted]:
            child.inc()

    def charge(self, charges: Iterable[Charge]) -> None:
        """Count what calls cost (a request's, or its audit's after it)."""
        for charge in charges:
            self.cost.labels(charge.model, charge.purpose).inc(charge.usd)

    def _grow_positions(self, n: int) -> None:
        # Every drafted position is exposed, at 0 until accepted once, so a
        # per-position rate reads 0 rather than "no data".
        while len(self._per_pos) < n:
            self._per_pos.append(self.num_accepted_tokens_per_pos.labels(str(len(self._per_pos))))

    def render(
        self, local_metrics_text: str | None, workers: Sequence[Mapping[str, Any]]
    ) -> tuple[bytes, str]:
        """The exposition body and its content type: the counters and histograms (every
        worker's, in multiprocess mode), the live state of each worker that answered
        (``pid``, ``upstreams``, ``in_flight``, ``adaptive_depth``; labelled by worker
        when there are several) and llama-server's samples when given."""
        label = self.shared is not None  # several workers: live gauges carry a worker label
        sources = [(str(w["pid"]) if label else None, w) for w in workers]
        extra = [
            *_live_gauges(
                [(pid, w["upstreams"]) for pid, w in sources],
                sum(w["in_flight"] for w in workers),
            ),
            *_depth_gauges([(pid, w["adaptive_depth"]) for pid, w in sources]),
            *_learning_metrics([(pid, w["learning"]) for pid, w in sources]),
            *LlamaCppMetrics(local_metrics_text).collect(),
        ]
        registry = self.shared if self.shared is not None else self.registry
        return generate_latest(_Scrape(registry, extra)), CONTENT_TYPE


def _worker_label(sources: Sequence[tuple[str | None, Any]]) -> list[str]:
    """``["worker"]`` when the sources are several workers (named by pid), else none."""
    return ["worker"] if any(worker is not None for worker, _ in sources) else []


def _depth_gauges(sources: Sequence[tuple[str | None, Mapping[str, Any]]]) -> list[Metric]:
    """Adaptive K per knob and context type, and the changes so far (``worker`` label when
    several workers: each keeps its own controllers)."""
    by_worker = _worker_label(sources)
    depth = GaugeMetricFamily(
        "specproxy_spec_depth",
        "current adaptive K: llama-server's speculative.n_max or the proxy's draft budget",
        labels=["knob", "context_type", *by_worker],
    )
    changes = CounterMetricFamily(
        "specproxy_spec_depth_adjustments",
        "changes of adaptive K since start (SPEC_ADJUST lines)",
        labels=["knob", *by_worker],
    )
    for worker, status in sources:
        tag = [worker] if worker is not None else []
        for knob, entry in status.items():
            if not entry.get("active"):
                continue
            for context, k in entry["k"].items():
                depth.add_metric([knob, context, *tag], k)
            changes.add_metric([knob, *tag], entry["adjustments"])
    return [depth, changes]


def _learning_metrics(sources: Sequence[tuple[str | None, Mapping[str, Any]]]) -> list[Metric]:
    """The learner's labels, audits and refits since start, and its scorer's holdout AUROC
    (``worker`` label when several workers)."""
    by_worker = _worker_label(sources)
    labels = CounterMetricFamily(
        "specproxy_learning_labels",
        "verified drafts labelled, by whether they agreed with the cloud",
        labels=["agreed", *by_worker],
    )
    audits = CounterMetricFamily(
        "specproxy_learning_audits",
        "accepted drafts verified in the background, by whether they agreed",
        labels=["agreed", *by_worker],
    )
    refits = CounterMetricFamily(
        "specproxy_learning_refits", "scorer refits tried", labels=by_worker
    )
    auroc = GaugeMetricFamily(
        "specproxy_learning_scorer_auroc",
        "the live learned scorer's AUROC on its held-back labels",
        labels=by_worker,
    )
    for worker, status in sources:
        if not status.get("enabled"):
            continue
        tag = [worker] if worker is not None else []
        for name, family in (("labels", labels), ("audits", audits)):
            total = status[name]["total" if name == "labels" else "n"]
            agreed = status[name]["agreed"]
            family.add_metric(["true", *tag], agreed)
            family.add_metric(["false", *tag], total - agreed)
        refits.add_metric(tag, status["refits"])
        if (value := status["scorer"]["auroc_holdout"]) is not None:
            auroc.add_metric(tag, value)
    return [labels, audits, refits, auroc]


def _live_gauges(
    sources: Sequence[tuple[str | None, Mapping[str, Mapping[str, Any]]]], in_flight: int
) -> list[Metric]:
    """The live gauges of one process (worker None) or of several, labelled by worker pid."""
    by_worker = _worker_label(sources)
    state = GaugeMetricFamily(
        "specproxy_circuit_state",
        "1 for the circuit's current state",
        labels=["upstream", "state", *by_worker],
    )
    opened = GaugeMetricFamily(
        "specproxy_circuit_opened",
        "times the circuit opened since start",
        labels=["upstream", *by_worker],
    )
    queued = GaugeMetricFamily(
        "specproxy_upstream_queued", "calls waiting for an in-flight slot", labels=["upstream"]
    )
    budget = GaugeMetricFamily(
        "specproxy_ratelimit_remaining",
        "the upstream's last reported remaining budget",
        labels=["upstream", "unit", *by_worker],
    )
    waiting: Tally[str] = Tally()
    for worker, upstreams in sources:
        tag = [worker] if worker is not None else []
        for name, status in upstreams.items():
            circuit = status["circuit"]
            for value in ("closed", "open", "half_open"):
                state.add_metric([name, value, *tag], float(circuit["state"] == value))
            opened.add_metric([name, *tag], circuit["opened_total"])
            waiting[name] += status["queued"]
            limits = status["rate_limit"]
            for unit, key in (
                ("tokens_minute", "remaining_tokens_minute"),
                ("requests_day", "remaining_requests_day"),
            ):
                if limits[key] is not None:
                    budget.add_metric([name, unit, *tag], limits[key])
    for name, n in waiting.items():
        queued.add_metric([name], n)
    running = GaugeMetricFamily("specproxy_requests_in_flight", "requests being answered")
    running.add_metric([], in_flight)
    return [state, opened, queued, budget, running]


class _Scrape(Collector):
    """One scrape: the proxy's registry, then llama-server's samples; nothing registered."""

    def __init__(self, registry: CollectorRegistry, extra: list[Metric]) -> None:
        self._registry = registry
        self._extra = extra

    def collect(self) -> Iterable[Metric]:
        for metric in self._registry.collect():  # fresh objects on every collect
            # The classic text format turns prometheus_client's ``*_created``
            # timestamps into extra gauge series: one per counter child. Dropped
            # here rather than with disable_created_metrics(), which is global.
            metric.samples = [s for s in metric.samples if not s.name.endswith("_created")]
            yield metric
        yield from self._extra
