"""bench/routing_latency.py: the arms' settings and the report arithmetic (no servers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.vocabulary import PolicyName
from bench.routing_latency import ARMS, arm_settings, markdown, percentile, summarise

ROOT = Path(__file__).resolve().parents[2]
BASE = {"policy": "seed", "max_draft_tokens": 64, "abort_min_score": 0.9}


def test_each_arm_switches_on_only_its_own_options() -> None:
    settings = {
        arm: arm_settings(BASE, "http://127.0.0.1:1", "http://127.0.0.1:2", arm) for arm in ARMS
    }
    specs = {arm: s.speculative_decoding for arm, s in settings.items()}
    budget = {arm: s.adaptive_depth.draft_budget.enabled for arm, s in settings.items()}
    assert budget == {arm: arm == "scored+abort+hedge+budget" for arm in ARMS}
    assert specs["seed"].policy is PolicyName.SEED
    assert (specs["seed"].early_abort, specs["seed"].hedge) == (False, "off")
    for arm in ("scored", "scored+abort", "scored+abort+hedge"):
        assert specs[arm].policy is PolicyName.COMBINED, arm  # a seed config still gets scored
    assert (specs["scored"].early_abort, specs["scored"].hedge) == (False, "off")
    assert (specs["scored+abort"].early_abort, specs["scored+abort"].hedge) == (True, "off")
    for arm in ("scored+abort+hedge", "scored+abort+hedge+budget"):
        assert (specs[arm].early_abort, specs[arm].hedge) == (True, "auto"), arm
    assert all(s.max_draft_tokens == 64 for s in specs.values())


def test_nearest_rank_percentile() -> None:
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 0.5) == 10.0
    assert percentile(values, 0.95) == 19.0
    assert percentile([3.0], 0.95) == 3.0


def test_summary_and_table() -> None:
    def row(latency: float, cloud: bool, called: bool, correct: bool) -> dict[str, object]:
        return {
            "latency_s": latency,
            "cloud_served": cloud,
            "cloud_called": called,
            "correct": correct,
        }

    seed = [row(1.0, True, True, True), row(3.0, False, False, False)]
    fast = [row(0.5, True, True, True), row(1.5, False, True, True)]
    summary = {"seed": summarise(seed), "scored": summarise(fast)}
    assert summary["seed"]["mean_s"] == 2.0 and summary["scored"]["mean_s"] == 1.0
    assert summary["scored"]["cloud_served"] == 0.5 and summary["scored"]["cloud_called"] == 1.0
    assert summary["scored"]["quality"] == 1.0
    text = markdown(summary)
    assert "| scored | 1.000 s |" in text and "| -50.0% |" in text
    with pytest.raises(KeyError):
        markdown({"scored": summary["scored"]})  # the seed arm is the baseline


@pytest.mark.real
def test_bench_runs_every_arm_on_the_real_llama_server(
    real_assets: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "latency.json"
    argv = [sys.executable, "-m", "bench.routing_latency", "--limit", "3"]
    done = subprocess.run(
        [*argv, "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["summary"]) == set(ARMS)
    for arm, rows in result["rows"].items():
        assert [r["kind"] for r in rows] == ["fact", "arithmetic", "code"], arm
    # the reference cloud answers what the judges accept: a spilled answer is right
    assert all(r["correct"] for rows in result["rows"].values() for r in rows if r["cloud_served"])
    assert "| scored+abort+hedge |" in done.stdout
