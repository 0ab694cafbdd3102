"""llama-server's own ``/metrics``, re-exposed by the proxy's.

Its ``llamacpp:*`` samples become gauges named ``specproxy_llamacpp_*``: they are
another process's readings taken at scrape time (reset when it restarts), so one
scrape of the proxy shows both sides.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

log = logging.getLogger("specproxy.metrics")

LOCAL_PREFIX = "llamacpp:"
REEXPORT_PREFIX = "specproxy_llamacpp_"
_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_]")


class LlamaCppMetrics(Collector):
    """llama-server's ``/metrics`` text as gauges ``specproxy_llamacpp_<name>``, labels kept.

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
    families: dict[str, GaugeMetricFamily] = {}
    for parsed_family in parsed:
        doc = parsed_family.documentation
        help_text = f"llama-server: {doc}" if doc else "llama-server"
        # Sample names, not family names: a counter family drops its _total.
        for sample in parsed_family.samples:
            name = reexported_name(sample.name)
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(name, help_text)
            family.add_sample(name, dict(sample.labels), sample.value)
    return list(families.values())
