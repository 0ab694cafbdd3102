"""The live families of ``/metrics``: each answering worker's state at scrape time.

Nothing here is counted per request: circuits, queues and rate budgets, adaptive K, the
learner's counts and its quality target, the cache's bytes are read from the
descriptions the workers give (``GroupSnapshot``). The load (in flight, queued) is summed
over the workers; what belongs to one worker's own breaker, controller or learner carries
a ``worker`` label (its pid) when there are several.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from app.learning.threshold import target_block

Sources = Sequence[tuple[str | None, Mapping[str, Any]]]  # (worker pid or None, its block)


def live_families(workers: Sequence[Mapping[str, Any]], *, by_worker: bool) -> list[Metric]:
    """Every live family of the ``workers``' descriptions (``pid``, ``upstreams``,
    ``in_flight``, ``adaptive_depth``, ``learning``, ``cache``), labelled by worker pid
    when ``by_worker``."""
    tags = [str(w["pid"]) if by_worker else None for w in workers]

    def sources(key: str) -> list[tuple[str | None, Any]]:
        return [(tag, w[key]) for tag, w in zip(tags, workers, strict=True)]

    return [
        *upstream_gauges(sources("upstreams"), sum(w["in_flight"] for w in workers)),
        *_depth_gauges(sources("adaptive_depth")),
        *_learning_metrics(sources("learning")),
        *_target_gauges(sources("learning")),
        _cache_bytes(workers),
    ]


def _cache_bytes(workers: Sequence[Mapping[str, Any]]) -> Metric:
    """The cache's bytes: one shared store (Redis) once, each worker's memory added up."""
    stores = [w["cache"] for w in workers if w.get("cache")]
    if stores and stores[0]["shared"]:
        stores = stores[:1]
    return GaugeMetricFamily(
        "specproxy_cache_bytes",
        "Bytes of the entries in the cache of verified answers",
        value=sum(c["bytes"] for c in stores),
    )


def _worker_label(sources: Sequence[tuple[str | None, Any]]) -> list[str]:
    """``["worker"]`` when the sources are several workers (named by pid), else none."""
    return ["worker"] if any(worker is not None for worker, _ in sources) else []


def _depth_gauges(sources: Sources) -> list[Metric]:
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


def _learning_metrics(sources: Sources) -> list[Metric]:
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


def upstream_gauges(
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


def _target_gauges(sources: Sources) -> list[Metric]:
    """The quality target (learning on) and the one-sided lower bound of the audited
    agreement of what was served locally (``app.learning.threshold``)."""
    by_worker = _worker_label(sources)
    target = GaugeMetricFamily(
        "specproxy_target_agreement",
        "target_agreement: the share of locally served answers that must agree with the cloud",
        labels=by_worker,
    )
    served = GaugeMetricFamily(
        "specproxy_served_agreement_lower_bound",
        "one-sided 95% lower bound of the audited agreement of locally served answers",
        labels=by_worker,
    )
    for worker, status in sources:
        block = target_block(status)
        if block is None:
            continue
        tag = [worker] if worker is not None else []
        target.add_metric(tag, block["target"])
        if (low := block["served"]["lower_bound"]) is not None:
            served.add_metric(tag, low)
    return [target, served]
