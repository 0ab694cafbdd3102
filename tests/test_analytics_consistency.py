"""Issue 4's acceptance check: one run through the proxy, three views that must agree.

The spec log (through spec_log_analyze), /stats and /metrics are fed by the same
requests; their speculation figures must be equal, and the plot must be drawn.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from app.tools.spec_log_analyze import main as analyze_main
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply, tokenize
from tests.support.proxy import MakeProxy

PROMPTS = [
    "Write a Python function that merges two sorted lists",
    "What is 12 * 7?",
    "Return a JSON object describing a cat",
    "List three rivers in Europe",
    "Tell me about the history of tea",
]
WORDS = ["the", "model", "drafts", "a", "short", "answer", "and", "cloud", "checks", "it"]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def scripted_run(local: FakeLlamaServer, cloud: FakeCerebras, n: int, seed: int = 7) -> None:
    """Queue ``n`` drafts of four kinds, and a verified answer for each draft that is doubted.

    Only verified drafts consume a cloud reply, so the kind decides whether one is queued:
    confident (accepted), hedged and agreed with, hedged and contradicted, truncated.
    """
    rng = random.Random(seed)
    for i in range(n):
        kind = i % 4
        draft = sentence(rng, 50 if kind == 3 else rng.randint(14, 20))
        if kind in (1, 2):
            draft = "Maybe " + draft.lower()
        probs = [0.95 if kind == 0 else rng.choice([0.95, 0.8, 0.6, 0.3]) for _ in tokenize(draft)]
        local.enqueue(Reply(draft, token_probs=probs))
        if kind == 1:
            cloud.enqueue(Reply(draft))
        elif kind != 0:
            keep = rng.randint(0, 12)
            cloud.enqueue(Reply(" ".join([*draft.split()[:keep], sentence(rng, 12)])))


def test_analyzer_stats_and_metrics_agree(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    tmp_path: Path,
    capsys,
) -> None:
    log_path = tmp_path / "spec.jsonl"
    runs = 60
    scripted_run(local, cloud, runs)
    with make_proxy(logging={"spec_log_file": str(log_path)}) as proxy:
        for i in range(runs):
            body = {
                "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                "stream": i % 3 == 0,
            }
            proxy.http.post("/v1/chat/completions", json=body).raise_for_status()
        stats = proxy.stats()
        metrics_text = proxy.http.get("/metrics").text
    # leaving the block shut the proxy down: the spec log is flushed

    plot = tmp_path / "acceptance.png"
    assert analyze_main([str(log_path), "--json", "--plot", str(plot)]) == 0
    report = json.loads(capsys.readouterr().out)

    speculation = stats["speculation"]
    assert speculation["num_drafts"] == 3 * runs // 4  # every doubted draft was verified
    assert set(stats["requests"]["by_outcome"]) >= {
        "accepted_without_verification",
        "spilled_over",
        "verified_draft_used",
    }
    rates = {k: v for k, v in speculation.items() if not k.endswith("_per_s")}
    assert {k: report["speculation"][k] for k in rates} == rates
    assert report["overall"]["rounds"] == speculation["num_drafts"]
    assert report["overall"]["valid_lines"] == runs
    assert report["bad_lines"]["count"] == 0

    samples = {
        (s.name, s.labels.get("position")): s.value
        for family in text_string_to_metric_families(metrics_text)
        for s in family.samples
    }
    assert samples[("specproxy_num_drafts_total", None)] == speculation["num_drafts"]
    assert samples[("specproxy_num_draft_tokens_total", None)] == speculation["num_draft_tokens"]
    assert (
        samples[("specproxy_num_accepted_tokens_total", None)]
        == (speculation["num_accepted_tokens"])
    )
    per_pos = [
        samples.get(("specproxy_num_accepted_tokens_per_pos_total", str(i)), 0.0)
        for i in range(len(speculation["num_accepted_tokens_per_pos"]))
    ]
    assert per_pos == speculation["num_accepted_tokens_per_pos"]

    for context, figures in stats["by_context_type"].items():
        group = report["by_context_type"][context]
        assert group["lines"] == figures["requests"]
        assert (group["num_drafts"], group["acceptance_rate"]) == (
            figures["num_drafts"],
            figures["acceptance_rate"],
        )
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
