"""Write the Grafana dashboard for the proxy's ``/metrics`` (deploy/grafana/specproxy.json).

The panels are data (``PANELS``): a title, a kind, a unit and PromQL queries over
``specproxy_*`` series. ``tests/telemetry/test_grafana.py`` holds the written file to
this script's output and checks that every series and label the queries use is in a
real ``/metrics`` scrape. Usage: ``python scripts/grafana_dashboard.py [--write]``
(without ``--write`` the JSON goes to stdout).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "specproxy.json"
SEL = 'instance=~"$instance"'  # every query keeps to the instances picked at the top
RATE = "[$__rate_interval]"
SPEC = f'strategy="speculative_decoding",{SEL}'
SERVED_LOCALLY = "accepted_without_verification|verified_draft_used|degraded"


def _cost(extra: str = "") -> str:
    return f"sum(specproxy_cost_usd_total{{{SEL}{extra}}})"


_BASELINE = f"sum(specproxy_baseline_cost_usd_total{{{SEL}}})"


def _quantile(q: float, histogram: str) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{{{SEL}}}{RATE})))"


# (row, title, kind, unit, [(legend, query)], width)
PANELS: list[tuple[str, str, str, str, list[tuple[str, str]], int]] = [
    ("Value", "Savings", "stat", "currencyUSD", [("", f"{_BASELINE} - {_cost()}")], 4),
    ("Value", "Savings %", "stat", "percentunit", [("", f"1 - {_cost()} / {_BASELINE}")], 4),
    ("Value", "Spend", "stat", "currencyUSD", [("", _cost())], 4),
    (
        "Value",
        "Served locally (speculative requests)",
        "stat",
        "percentunit",
        [
            (
                "",
                f'sum(increase(specproxy_requests_total{{{SPEC},outcome=~"{SERVED_LOCALLY}"}}'
                f"[$__range])) / sum(increase(specproxy_requests_total{{{SPEC}}}[$__range]))",
            )
        ],
        6,
    ),
    (
        "Value",
        "Served-draft agreement (audits)",
        "stat",
        "percentunit",
        [
            (
                "",
                f'sum(specproxy_learning_audits_total{{agreed="true",{SEL}}})'
                f" / sum(specproxy_learning_audits_total{{{SEL}}})",
            )
        ],
        6,
    ),
    (
        "Value",
        "Spend and all-cloud baseline (USD per hour)",
        "timeseries",
        "currencyUSD",
        [
            (
                "{{purpose}}",
                f"sum by (purpose) (rate(specproxy_cost_usd_total{{{SEL}}}{RATE})) * 3600",
            ),
            (
                "all-cloud baseline",
                f"sum(rate(specproxy_baseline_cost_usd_total{{{SEL}}}{RATE})) * 3600",
            ),
        ],
        24,
    ),
    (
        "Routing",
        "Requests by outcome",
        "timeseries",
        "reqps",
        [("{{outcome}}", f"sum by (outcome) (rate(specproxy_requests_total{{{SEL}}}{RATE}))")],
        12,
    ),
    (
        "Routing",
        "Spill-over rate",
        "timeseries",
        "percentunit",
        [
            (
                "spilled over",
                f"sum(rate(specproxy_spill_overs_total{{{SEL}}}{RATE}))"
                f" / sum(rate(specproxy_requests_total{{{SPEC}}}{RATE}))",
            )
        ],
        12,
    ),
    (
        "Routing",
        "Draft acceptance rate",
        "timeseries",
        "percentunit",
        [
            (
                "accepted / drafted tokens",
                f"sum(rate(specproxy_num_accepted_tokens_total{{{SEL}}}{RATE}))"
                f" / sum(rate(specproxy_num_draft_tokens_total{{{SEL}}}{RATE}))",
            )
        ],
        8,
    ),
    (
        "Routing",
        "Acceptance by draft position",
        "bargauge",
        "percentunit",
        [
            (
                "{{position}}",
                "sum by (position) (increase(specproxy_num_accepted_tokens_per_pos_total"
                f"{{{SEL}}}[$__range])) / scalar(sum(increase(specproxy_num_drafts_total"
                f"{{{SEL}}}[$__range])))",
            )
        ],
        8,
    ),
    (
        "Routing",
        "Hedges and early aborts",
        "timeseries",
        "reqps",
        [("{{event}}", f"sum by (event) (rate(specproxy_routing_events_total{{{SEL}}}{RATE}))")],
        8,
    ),
    (
        "Latency",
        "Request latency",
        "timeseries",
        "s",
        [
            ("p50", _quantile(0.5, "specproxy_request_latency_seconds")),
            ("p95", _quantile(0.95, "specproxy_request_latency_seconds")),
            ("draft p95", _quantile(0.95, "specproxy_draft_latency_seconds")),
            ("verify p95", _quantile(0.95, "specproxy_verify_latency_seconds")),
            ("first token p95 (streams)", _quantile(0.95, "specproxy_time_to_first_token_seconds")),
        ],
        12,
    ),
    (
        "Latency",
        "Completion tokens by source",
        "timeseries",
        "short",
        [("{{source}}", f"sum by (source) (rate(specproxy_tokens_total{{{SEL}}}{RATE}))")],
        12,
    ),
    (
        "Upstreams",
        "Upstream errors",
        "timeseries",
        "short",
        [
            (
                "{{upstream}} {{kind}}",
                f"sum by (upstream, kind) (rate(specproxy_upstream_errors_total{{{SEL}}}{RATE}))",
            )
        ],
        8,
    ),
    (
        "Upstreams",
        "Circuit state",
        "stat",
        "none",
        [
            (
                "{{upstream}}: {{state}}",
                f"max by (upstream, state) (specproxy_circuit_state{{{SEL}}}) == 1",
            )
        ],
        8,
    ),
    (
        "Upstreams",
        "Cloud rate budget remaining",
        "timeseries",
        "short",
        [
            (
                "{{upstream}} {{unit}}",
                f"min by (upstream, unit) (specproxy_ratelimit_remaining{{{SEL}}})",
            )
        ],
        8,
    ),
    (
        "Upstreams",
        "Queued calls and requests in flight",
        "timeseries",
        "short",
        [
            ("queued {{upstream}}", f"sum by (upstream) (specproxy_upstream_queued{{{SEL}}})"),
            ("in flight", f"sum(specproxy_requests_in_flight{{{SEL}}})"),
        ],
        24,
    ),
    (
        "Keys",
        "Spend by key (USD per hour)",
        "timeseries",
        "currencyUSD",
        [
            (
                "{{key}} ({{team}})",
                f"sum by (key, team) (rate(specproxy_key_cost_usd_total{{{SEL}}}{RATE})) * 3600",
            )
        ],
        12,
    ),
    (
        "Keys",
        "Savings by key",
        "bargauge",
        "currencyUSD",
        [
            (
                "{{key}}",
                f"sum by (key) (specproxy_key_baseline_cost_usd_total{{{SEL}}})"
                f" - sum by (key) (specproxy_key_cost_usd_total{{{SEL}}})",
            )
        ],
        6,
    ),
    (
        "Keys",
        "Requests by key",
        "timeseries",
        "reqps",
        [("{{key}}", f"sum by (key) (rate(specproxy_key_requests_total{{{SEL}}}{RATE}))")],
        6,
    ),
    (
        "Keys",
        "Tokens by team",
        "timeseries",
        "short",
        [
            (
                "{{team}} {{kind}} {{source}}",
                f"sum by (team, kind, source) (rate(specproxy_key_tokens_total{{{SEL}}}{RATE}))",
            )
        ],
        24,
    ),
]

_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
_HEIGHT = 7


def _panel(
    panel_id: int, title: str, kind: str, unit: str, queries: list[tuple[str, str]]
) -> dict[str, Any]:
    panel: dict[str, Any] = {
        "id": panel_id,
        "type": kind,
        "title": title,
        "datasource": _DATASOURCE,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": _DATASOURCE,
                "expr": expr,
                "legendFormat": legend,
                "instant": kind != "timeseries",
            }
            for i, (legend, expr) in enumerate(queries)
        ],
    }
    if kind == "stat":
        panel["options"] = {"textMode": "value_and_name" if "{{" in queries[0][0] else "value"}
    return panel


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (schema 39): rows of panels, a datasource
    variable and an instance filter, so it imports into any Grafana with Prometheus."""
    panels: list[dict[str, Any]] = []
    row, x, y = None, 0, 0
    for title_row, title, kind, unit, queries, width in PANELS:
        if title_row != row:
            if x:
                x, y = 0, y + _HEIGHT
            panels.append(
                {
                    "id": len(panels) + 1,
                    "type": "row",
                    "title": title_row,
                    "collapsed": False,
                    "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                    "panels": [],
                }
            )
            row, y = title_row, y + 1
        if x + width > 24:
            x, y = 0, y + _HEIGHT
        panel = _panel(len(panels) + 1, title, kind, unit, queries)
        panel["gridPos"] = {"h": _HEIGHT, "w": width, "x": x, "y": y}
        panels.append(panel)
        x += width
    return {
        "uid": "specproxy",
        "title": "specproxy",
        "description": "Spend and savings, routing, latency and upstream health of specproxy",
        "tags": ["specproxy", "llm"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "",
        "panels": panels,
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                },
                {
                    "name": "instance",
                    "label": "Instance",
                    "type": "query",
                    "datasource": _DATASOURCE,
                    "query": {"query": "label_values(specproxy_requests_total, instance)"},
                    "definition": "label_values(specproxy_requests_total, instance)",
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                },
            ]
        },
        "annotations": {"list": []},
    }


def render() -> str:
    """The file's text."""
    return json.dumps(dashboard(), indent=2) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT}")
    args = parser.parse_args()
    if args.write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(render())
        print(f"wrote {OUT}")
    else:
        print(render(), end="")


if __name__ == "__main__":
    main()
