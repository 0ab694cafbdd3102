"""Prometheus metrics for ``GET /metrics``: ``Stats`` rendered, plus llama-server's re-exported.

Nothing here counts. A finished request is counted once, by ``Stats.record``;
a scrape renders the same ``Stats`` that ``/stats`` serves (``StatsCollector``
turns it into counter and histogram families), so the two cannot disagree.
With several workers (``--workers N``) that ``Stats`` is every answering
worker's ``state()`` merged (``GroupSnapshot.totals``), exactly as for
``/stats``; the live gauges come from the same descriptions.

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

The live gauges (circuits, queues, adaptive K, the learner, the cache's bytes) are
read from each answering worker's description at scrape time
(``app.telemetry.live_metrics``), so nothing extra happens per request.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from app.telemetry.key_metrics import key_families
from app.telemetry.live_metrics import live_families
from app.telemetry.llamacpp import LlamaCppMetrics
from app.telemetry.stats import Stats
from app.telemetry.tallies import Histogram
from app.vocabulary import Outcome

# generate_latest writes the classic text format; without Accept negotiation
# that is what the content type must announce (not prometheus_client's LATEST).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# Stats' histograms by the name /metrics gives them.
_HISTOGRAMS = (
    ("specproxy_draft_latency_seconds", "draft", "Local draft (or local answer) latency"),
    (
        "specproxy_verify_latency_seconds",
        "verify",
        "Cloud verification (or cloud answer) latency",
    ),
    (
        "specproxy_request_latency_seconds",
        "total",
        "Whole request latency, to the last byte for streams",
    ),
    (
        "specproxy_time_to_first_token_seconds",
        "first_token",
        "Streams: time to the first content (or tool-call) delta on its way to the client",
    ),
    (
        "specproxy_draft_similarity",
        "similarity",
        "Similarity of a verified draft to the verified answer",
    ),
)


def render(
    totals: Stats,
    local_metrics_text: str | None,
    workers: Sequence[Mapping[str, Any]],
    *,
    by_worker: bool = False,
    max_key_labels: int = 50,
) -> tuple[bytes, str]:
    """The exposition body and its content type: ``totals``' counters and histograms,
    the live state of each worker that answered (``pid``, ``upstreams``, ``in_flight``,
    ``adaptive_depth``, ``learning``; labelled by worker pid when ``by_worker``) and
    llama-server's samples when given; the per-key families (``key`` labels for at most
    ``max_key_labels`` keys: app.telemetry.key_metrics)."""
    extra = [
        *live_families(workers, by_worker=by_worker),
        *key_families(totals.keys, max_key_labels),
        *LlamaCppMetrics(local_metrics_text).collect(),
    ]
    return generate_latest(_Scrape(StatsCollector(totals), extra)), CONTENT_TYPE


class StatsCollector(Collector):
    """A ``Stats`` as Prometheus counter and histogram families, built afresh on every
    ``collect()`` (no ``_created`` series: the classic text format would turn each into
    an extra gauge per child)."""

    def __init__(self, stats: Stats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        spec = s.speculation
        yield _counter("specproxy_num_drafts", "Verified drafts (seed 003 num_drafts)", spec.drafts)
        yield _counter("specproxy_num_draft_tokens", "Tokens in verified drafts", spec.draft_tokens)
        yield _counter(
            "specproxy_num_accepted_tokens",
            "Draft tokens the verifier agreed with (accepted prefix)",
            spec.accepted_tokens,
        )
        # Every drafted position is exposed, at 0 until accepted once, so a
        # per-position rate reads 0 rather than "no data".
        accepted = spec.accepted_per_pos
        width = max(len(spec.drafted_per_pos), len(accepted))
        yield _labelled(
            "specproxy_num_accepted_tokens_per_pos",
            "Verified drafts accepted at each draft position (0-based)",
            ["position"],
            (((str(i),), accepted[i] if i < len(accepted) else 0) for i in range(width)),
        )
        yield _labelled(
            "specproxy_requests",
            "Finished chat requests",
            ["strategy", "outcome", "context_type"],
            s.finished.items(),
        )
        spilled = Outcome.SPILLED_OVER.value
        yield _counter(
            "specproxy_spill_overs",
            "Requests answered by the cloud after a draft",
            sum(n for (_, outcome, _), n in s.finished.items() if outcome == spilled),
        )
        yield _labelled(
            "specproxy_upstream_errors",
            "Failed upstream calls: HTTP status, or timeout/unavailable/busy/protocol/stream",
            ["upstream", "kind"],
            # Stats keys them "upstream:kind"; a kind is a status or a word, never a colon.
            ((key.rpartition(":")[::2], n) for key, n in s.upstream_errors.items()),
        )
        yield _labelled(
            "specproxy_requests_refused",
            "Requests refused before they reached a strategy (auth, size, bad JSON), by status",
            ["status"],
            (((k,), n) for k, n in s.refused.items()),
        )
        yield _labelled(
            "specproxy_log_lines_lost",
            "Lines a log could not write (directory gone, disk full), by log",
            ["log"],
            (((k,), n) for k, n in s.lost_lines.items()),
        )
        yield _labelled(
            "specproxy_routing_events",
            "Requests hedged (cloud called with the draft), answered cloud-first, streamed "
            "past the first-token budget, waited for as trusted there, aborted early",
            ["event"],
            (((k,), n) for k, n in s.routing_events.items()),
        )
        yield _labelled(
            "specproxy_lane",
            "Speculative requests by the gate's lane before the draft: cloud, local, uncertain",
            ["lane"],
            (((k,), n) for k, n in s.lanes.items()),
        )
        yield _labelled(
            "specproxy_tokens",
            "Completion tokens by where they were generated",
            ["source"],
            ((("local",), s.tokens_local), (("cloud",), s.tokens_cloud)),
        )
        yield _labelled(
            "specproxy_cost_usd",
            "Spend in USD by model and purpose (draft, verification, spill, hedge, "
            "hedge_cancelled, audit, pass_through), at models.NAME.price",
            ["model", "purpose"],
            (
                ((model, purpose), usd)
                for model, by_purpose in s.spend.usd.items()
                for purpose, usd in by_purpose.items()
            ),
        )
        yield _labelled(
            "specproxy_cloud_calls",
            "Calls to a cloud model by purpose (verification, spill, hedge, hedge_cancelled, "
            "audit, pass_through)",
            ["purpose"],
            (((purpose,), n) for purpose, n in s.spend.calls.items()),
        )
        yield _counter(
            "specproxy_baseline_cost_usd",
            "What the same requests would have cost sent to the verify model alone",
            s.spend.baseline_usd,
        )
        for name, key, documentation in _HISTOGRAMS:
            yield _histogram(name, documentation, s.histograms[key])
        yield _labelled(
            "specproxy_cache_requests",
            "Requests that asked the cache of verified answers, by result (hit, miss, bypass)",
            ["result"],
            (((r,), s.cache[r]) for r in ("hit", "miss", "bypass")),
        )
        yield _counter(
            "specproxy_cache_saved_usd",
            "What the cache's hits would have cost the verify model (their stored counts)",
            s.cache_saved_usd,
        )


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def _labelled(
    name: str,
    documentation: str,
    labels: list[str],
    children: Iterable[tuple[Sequence[str], float]],
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=labels)
    for values, n in children:
        family.add_metric(values, n)
    return family


def _histogram(name: str, documentation: str, histogram: Histogram) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation)
    cumulative, buckets = 0, []
    for bound, n in zip((*histogram.bounds, float("inf")), histogram.counts, strict=True):
        cumulative += n
        buckets.append((floatToGoString(bound), cumulative))
    family.add_metric([], buckets, histogram.total)
    return family


class _Scrape(Collector):
    """One scrape: the counters and histograms, then the live and llama-server families."""

    def __init__(self, counted: Collector, extra: list[Metric]) -> None:
        self._counted = counted
        self._extra = extra

    def collect(self) -> Iterable[Metric]:
        yield from self._counted.collect()
        yield from self._extra
