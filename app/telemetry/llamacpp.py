"""llama-server's own ``/metrics``, re-exposed by the proxy's.

Its ``llamacpp:*`` families come back named ``specproxy_llamacpp_*``, counters as counters
(``..._total``: ``rate()`` reads them, and a restart of llama-server is a counter reset as
Prometheus knows it) and the rest as gauges, read at scrape time, so one scrape of the
proxy shows both sides.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

log = logging.getLogger("specproxy.metrics")

LOCAL_PREFIX = "llamacpp:"
REEXPORT_PREFIX = "specproxy_llamacpp_"
_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_]")


class LlamaCppMetrics(Collector):
    """llama-server's ``/metrics`` text as ``specproxy_llamacpp_<name>``, types and labels
    kept (a family of another type than counter is a gauge).

    A text that does not parse yields nothing (logged at debug): the proxy's
    own metrics must never fail because of the local server's.
    """

    def __init__(self, text: str | None) -> None:
        self.families = _reexport(text) if text else []

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def reexported_name(name: str) -> str:
    """``llamacpp:spec_decode_num_drafts_total`` -> ``specproxy_llamacpp_spec_decode_...``."""
    return REEXPORT_PREFIX + _NOT_IN_NAME.sub("_", name.removeprefix(LOCAL_PREFIX))


def _reexport(text: str) -> list[Metric]:
    try:
        parsed = list(text_string_to_metric_families(text))
    # The parser raises ValueError for most bad lines but other types for some
    # (it indexes and splits freely); any failure means "no local metrics".
    except Exception as exc:
        log.debug("ignoring llama-server /metrics that does not parse: %s", exc)
        return []
    families: dict[str, Metric] = {}
    for parsed_family in parsed:
        doc = parsed_family.documentation
        help_text = f"llama-server: {doc}" if doc else "llama-server"
        counter = parsed_family.type == "counter"
        base = reexported_name(parsed_family.name)
        for sample in parsed_family.samples:
            if counter:
                if sample.name not in (parsed_family.name, parsed_family.name + "_total"):
                    continue  # a counter's _created: when the other process began counting
                key, name = base, base + "_total"
            else:
                key = name = reexported_name(sample.name)
            if (family := families.get(key)) is None:
                kind = CounterMetricFamily if counter else GaugeMetricFamily
                family = families[key] = kind(key, help_text)
            family.add_sample(name, dict(sample.labels), sample.value)
    return list(families.values())
