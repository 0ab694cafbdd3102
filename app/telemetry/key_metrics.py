"""``/metrics`` by key: requests, tokens, spend and baseline with ``key`` and ``team`` labels.

Rendered from the same ``Stats`` as the rest of ``/metrics`` (its ``keys``:
app.telemetry.by_key), so ``/stats`` → ``keys`` and these series agree. The ``key`` label
is bounded: the ``telemetry.max_key_labels`` keys with the most requests (ties by name)
keep their own series, and the rest are added up as ``key="other"`` within their team,
so a sum by team stays exact however many keys there are. A key without a team has
``team=""`` (no team, to Prometheus). Requests without a key are not in these series.

    spend per key      = sum by (key) (increase(specproxy_key_cost_usd_total[1h]))
    savings per team   = sum by (team) (specproxy_key_baseline_cost_usd_total)
                         - sum by (team) (specproxy_key_cost_usd_total)
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, Metric

from app.telemetry.by_key import KeyTally, KeyUsage

OTHER = "other"  # the key label of the keys past telemetry.max_key_labels


def labelled_keys(usage: KeyUsage, max_labels: int) -> dict[tuple[str, str], KeyTally]:
    """(key label, team label) -> tally: the busiest ``max_labels`` keys by name, the rest
    added up as ``other`` per team."""
    ranked = sorted(usage.keys.items(), key=lambda item: (-item[1].requests, item[0]))
    shown: dict[tuple[str, str], KeyTally] = {}
    for rank, (name, tally) in enumerate(ranked):
        team = tally.team or ""
        if rank < max_labels:
            shown[name, team] = tally
        else:
            shown.setdefault((OTHER, team), KeyTally(team=tally.team)).merge(tally)
    return shown


def key_families(usage: KeyUsage, max_labels: int) -> Iterator[Metric]:
    """The per-key counter families (empty of samples when no request had a key)."""
    shown = labelled_keys(usage, max_labels)
    requests = CounterMetricFamily(
        "specproxy_key_requests", "Finished chat requests by key", labels=["key", "team"]
    )
    tokens = CounterMetricFamily(
        "specproxy_key_tokens",
        "Tokens by key: prompt or completion, of a local or a cloud model",
        labels=["key", "team", "kind", "source"],
    )
    cost = CounterMetricFamily(
        "specproxy_key_cost_usd",
        "Spend in USD by key, model and purpose, at models.NAME.price",
        labels=["key", "team", "model", "purpose"],
    )
    baseline = CounterMetricFamily(
        "specproxy_key_baseline_cost_usd",
        "What the key's requests would have cost sent to the verify model alone",
        labels=["key", "team"],
    )
    hits = CounterMetricFamily(
        "specproxy_key_cache_hits",
        "Requests answered from the cache, by key",
        labels=["key", "team"],
    )
    for (key, team), tally in shown.items():
        requests.add_metric([key, team], tally.requests)
        for kind in ("prompt", "completion"):
            for source in ("local", "cloud"):
                tokens.add_metric([key, team, kind, source], tally.tokens[f"{kind}:{source}"])
        for model, by_purpose in tally.spend.usd.items():
            for purpose, usd in by_purpose.items():
                cost.add_metric([key, team, model, purpose], usd)
        baseline.add_metric([key, team], tally.spend.baseline_usd)
        hits.add_metric([key, team], tally.cache["hit"])
    yield from (requests, tokens, cost, baseline, hits)
