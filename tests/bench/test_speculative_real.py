"""bench/speculative.py: the server pool, the /metrics deltas (no servers), and one real run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.composition import depth_rule
from app.config import ServerDepthConfig
from app.routing.depth import DepthController, DepthRule
from bench.speculative import (
    ACCEPTED_PER_POS,
    ARMS,
    counters_delta,
    load_prompts,
    pool_depths,
    reachable_depths,
    server_plan,
    spec_counters,
)

ROOT = Path(__file__).resolve().parents[2]
METRICS = """\
# HELP llamacpp:spec_decode_num_drafts_total Number of drafts.
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total {drafts}
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total {tokens}
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total {accepted}
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 102
# TYPE {per_pos} counter
{per_pos}{{position="0"}} {p0}
{per_pos}{{position="1"}} {p1}
"""


def page(drafts: int, tokens: int, accepted: int, p0: int, p1: int) -> str:
    return METRICS.format(
        drafts=drafts, tokens=tokens, accepted=accepted, per_pos=ACCEPTED_PER_POS, p0=p0, p1=p1
    )


def test_the_default_rule_reaches_every_even_k_from_2_to_16() -> None:
    rule = depth_rule(ServerDepthConfig(k_min=2, k_max=16))
    assert pool_depths(rule) == [2, 4, 6, 8, 10, 12, 14, 16]
    small = depth_rule(ServerDepthConfig(k_min=2, k_max=8))
    assert reachable_depths(small) == {2, 4, 6, 8}
    assert pool_depths(small) == [2, 4, 6, 8, 16]  # the fixed arm K=16 joins the pool


def test_the_controller_never_leaves_the_pool() -> None:
    rule = DepthRule(k_min=3, k_max=11, k_start=8, interval=4, window=8, ceilings={"json": 6})
    pool = reachable_depths(rule)
    controller = DepthController(rule)
    for n in range(200):  # acceptance swinging between all and nothing
        for context in ("prose", "json", "code"):
            assert controller.k(context) in pool
            controller.record(context, 4 * ((n // 5) % 2), 4)


def test_servers_differ_only_in_their_depth() -> None:
    plan = server_plan([2, 4], Path("/m/draft.gguf"), 0.0, 2048)
    assert list(plan) == ["vanilla", "ngram", "K=2", "K=4"]
    assert plan["vanilla"] == ["-c", "2048", "--metrics"]
    assert plan["ngram"][-2:] == ["--spec-type", "ngram-simple"]
    assert "--spec-draft-p-min" in plan["K=2"]  # pinned always
    k2, k4 = plan["K=2"], plan["K=4"]
    differ = [i for i, (a, b) in enumerate(zip(k2, k4, strict=True)) if a != b]
    assert len(differ) == 1 and k2[differ[0] - 1] == "--spec-draft-n-max"


def test_metrics_delta_of_one_request() -> None:
    before = spec_counters(page(10, 40, 30, 9, 8))
    after = spec_counters(page(13, 52, 40, 12, 10))
    assert counters_delta(before, after) == {
        "drafts": 3,
        "draft_tokens": 12,
        "accepted": 10,
        "per_pos": [3, 2],
    }
    empty = spec_counters("")
    assert counters_delta(empty, empty) == {
        "drafts": 0,
        "draft_tokens": 0,
        "accepted": 0,
        "per_pos": [],
    }


def test_limit_takes_the_first_prompts_of_each_type() -> None:
    lines = [
        json.dumps({"id": f"{c}-{i}", "context_type": c, "prompt": "p"})
        for c in ("code", "math")
        for i in (1, 2, 3)
    ]
    assert [p.id for p in load_prompts(lines, 2)] == ["code-1", "code-2", "math-1", "math-2"]
    assert len(load_prompts(lines)) == 6


@pytest.mark.real
def test_bench_runs_every_arm_on_the_real_llama_server(
    real_assets: tuple[Path, Path], tmp_path: Path
) -> None:
    out, png = tmp_path / "speculative.json", tmp_path / "speculative.png"
    argv = [sys.executable, "-m", "bench.speculative", "--limit", "1"]
    argv += ["--repeats", "1", "--max-tokens", "8", "--k-max", "8"]
    argv += ["--json", str(out), "--plot", str(png), "--markdown", str(tmp_path / "s.md")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    result = json.loads(out.read_text())
    arms = result["report"]["arms"]
    assert list(arms) == list(ARMS)
    assert result["setup"]["pool"] == [2, 4, 6, 8, 16]
    for arm, row in arms.items():
        assert row["all"]["n"] == 5 and row["all"]["tokens"] > 0, arm
    for arm in ("K=4", "K=8", "K=16", "adaptive"):  # a draft model drafts every request
        assert arms[arm]["all"]["drafted"] > 0 and arms[arm]["all"]["drafts"] > 0, arm
    assert arms["vanilla"]["all"]["drafted"] == 0 and arms["vanilla"]["all"]["drafts"] == 0
    assert result["setup"]["metrics_mismatches"] == 0  # /metrics deltas match the timings
    adaptive = [r for r in result["records"] if r["arm"] == "adaptive"]
    assert {r["context_type"]: r["k"] for r in adaptive} == {
        "code": 8,  # 8 + 8, held at k_max
        "prose": 8,
        "math": 4,
        "json": 6,
        "list": 8,
    }
    assert result["report"]["verdict"]["best_fixed"] in ("K=4", "K=8", "K=16")
    assert png.stat().st_size > 0
    assert "| adaptive |" in done.stdout and "emulated by a pool" in done.stdout
