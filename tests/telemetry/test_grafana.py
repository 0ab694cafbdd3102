"""The Grafana dashboard (deploy/grafana/specproxy.json) is current and asks only for
series the proxy exports.

Every query's ``specproxy_*`` series, label matchers and ``by (...)`` labels are held
to real ``/metrics`` scrapes of proxies that served traffic touching each of them:
verified and audited drafts (learning on), a failed verification, a hedge, and a
cerebras-only request.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from types import ModuleType

from prometheus_client.samples import Sample

from app.config import settings_from_mapping
from tests.fakes.by_prompt import ScriptedCerebras, ScriptedLlamaServer
from tests.fakes.script import Reply
from tests.learning.traffic import learning_config, questions, script
from tests.support.answers import CLOUD_OTHER, GOOD_DRAFT, HEDGED
from tests.support.proxy import CLOUD_KEY, Proxy, proxy_config, run_proxy
from tests.support.scripted import cerebras_class, llama_server_class
from tests.support.scripts import load_script
from tests.telemetry.test_metrics import parse

__all__ = ["cerebras_class", "llama_server_class"]  # fixtures: the stand-ins answer by prompt

ROOT = Path(__file__).resolve().parents[2]
WRITTEN = ROOT / "deploy" / "grafana" / "specproxy.json"
SERIES = re.compile(r"(specproxy_\w+)(?:\{([^}]*)\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
BY = re.compile(r"by \(([^)]*)\)")
TARGET_LABELS = {"instance", "job"}  # added by Prometheus at scrape, not by the proxy
PRICES = {"cerebras": {"price": {"input_per_mtok": 0.35, "output_per_mtok": 0.75}}}
GRAFANA_KEY = "sk-grafana-0d1e2f3a4b"
KEYED = {"server": {"keys": [{"name": "grafana", "key": "${GRAFANA_KEY}", "team": "ops"}]}}


def generator() -> ModuleType:
    return load_script("grafana_dashboard")


def queries() -> list[str]:
    panels = json.loads(WRITTEN.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def served(local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path) -> dict:
    """Samples by name, from three proxies: one learning (its drafts verified or audited,
    one verification failing), one hedging every draft (one spills, one races its hedge),
    one accepting a good draft (the shipped flow, learning off) from a virtual key."""
    triples = questions(12)
    script(local, cloud, triples)
    failing = "How many letters are in the word lantern?"
    local.script[failing] = Reply("The word lantern has 9 letters.")
    cloud.script[failing] = Reply(status=500)
    local.script["Say hello"] = Reply(HEDGED)
    cloud.script["Say hello"] = Reply(CLOUD_OTHER)
    local.script["Hello"] = Reply(GOOD_DRAFT)
    cloud.script["Hello"] = Reply(CLOUD_OTHER)
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "GRAFANA_KEY": GRAFANA_KEY}
    samples: dict[str, list[Sample]] = defaultdict(list)
    learning = learning_config(str(tmp_path / "state"))
    hedging = {"speculative_decoding": {"hedge": "always"}}
    for overrides, prompts, key in (
        (learning, [p for p, _, _ in triples] + [failing], "unused"),
        (hedging, ["Say hello", "Hello"], "unused"),
        # accepted as it is: no hedge to race it, no learned scorer to doubt it
        (KEYED, ["Hello"], GRAFANA_KEY),
    ):
        config = proxy_config(local.url, cloud.url, models=PRICES, **overrides)
        with run_proxy(settings_from_mapping(config, env=env), api_key=key) as proxy:
            for prompt in prompts:
                ask(proxy, prompt)
            ask(proxy, "Say hello", strategy="cerebras_only")
            for name, found in parse(proxy.http.get("/metrics").text).items():
                samples[name] += found
    return samples


def ask(proxy: Proxy, prompt: str, strategy: str = "speculative_decoding") -> None:
    proxy.openai.chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": prompt}],
        extra_headers={"X-Routing-Strategy": strategy},
    )


def test_the_written_dashboard_is_the_generators() -> None:
    assert WRITTEN.read_text() == generator().render(), (
        "deploy/grafana/specproxy.json is stale: run `python scripts/grafana_dashboard.py --write`"
    )


def test_the_dashboard_has_unique_panels_and_a_datasource_variable() -> None:
    model = json.loads(WRITTEN.read_text())
    ids = [panel["id"] for panel in model["panels"]]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in model["templating"]["list"]} == {"datasource", "instance"}
    for panel in model["panels"]:
        place = panel["gridPos"]
        assert place["x"] >= 0 and place["x"] + place["w"] <= 24
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"
            assert 'instance=~"$instance"' in target["expr"]
    titles = " ".join(panel["title"].lower() for panel in model["panels"])
    for subject in ("spill", "acceptance", "savings", "latency", "upstream errors", "circuit"):
        assert subject in titles


def test_every_series_and_label_the_queries_use_is_exported(
    local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    samples = served(local, cloud, tmp_path)
    checked = 0
    for expr in queries():
        used = SERIES.findall(expr)
        assert used, expr
        labels_of_expr: set[str] = {"le"}
        for name, selector in used:
            assert samples.get(name), f"{name} is not in /metrics ({expr})"
            seen: dict[str, set[str]] = defaultdict(set)
            for sample in samples[name]:
                for key, value in sample.labels.items():
                    seen[key].add(value)
            labels_of_expr |= set(seen)
            for key, op, value in MATCHER.findall(selector):
                if key in TARGET_LABELS:
                    continue
                assert key in seen, f"{name} has no label {key}"
                if op == "=":
                    assert value in seen[key], f'{name}{{{key}="{value}"}} never seen'
                elif op == "=~":  # each alternative is a value the proxy exports
                    for alternative in value.split("|"):
                        assert alternative in seen[key], f"{name} {key}: {alternative}"
                checked += 1
        for group in BY.findall(expr):
            for label in (part.strip() for part in group.split(",")):
                assert label in labels_of_expr, f"by ({label}) in {expr}"
    assert checked >= 3
