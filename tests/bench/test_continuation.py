"""bench/continuation.py: where each arm cuts, the summary over the items it broke, and one
small run on the real llama-server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.continuation import ARMS, cut_of, markdown, summarise

ROOT = Path(__file__).resolve().parents[2]
LONG = "one two three four five six seven eight nine ten eleven twelve"  # 12 tokens


def test_each_arm_cuts_where_it_says_and_never_past_the_end() -> None:
    assert [cut_of(arm, LONG) for arm in ("unbroken", "cut_1", "cut_10", "cut_half")] == [
        None,
        1,
        10,
        6,
    ]
    assert cut_of("cut_10", "too short") is None  # sent whole: not among the arm's items
    assert cut_of("cut_half", "one") is None


def test_the_summary_holds_each_cut_against_the_same_items_unbroken_and_alone() -> None:
    def row(item: str, cut: int | None, correct: bool, by: str | None = None) -> dict[str, Any]:
        return {"id": item, "cut": cut, "continued_by": by, "correct": correct, "chars": 10}

    rows = {
        "unbroken": [row("a", None, True), row("b", None, True), row("c", None, True)],
        "cut_1": [row("a", 1, True, "local"), row("b", 1, False, "local"), row("c", None, True)],
        "cut_10": [row("a", None, True), row("b", None, True), row("c", None, True)],
        "cut_half": [row("a", 2, True, "local"), row("b", 2, True, "local"), row("c", None, True)],
        "local_alone": [row("a", None, False), row("b", None, True), row("c", None, False)],
    }
    summary = summarise(rows)
    assert set(summary) == {"cut_1", "cut_half"}  # cut_10 broke nothing
    assert summary["cut_1"]["n"] == 2 and summary["cut_1"]["quality"] == 0.5
    assert summary["cut_1"]["unbroken_quality"] == 1.0
    assert summary["cut_1"]["local_alone_quality"] == 0.5  # items a and b only
    assert "| cut_1 | 2 | 100.0% | 50.0% | 100.0% | 50.0% | 10 / 10 |" in markdown(summary)


@pytest.mark.real
def test_bench_continues_on_the_real_llama_server(
    real_assets: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "continuation.json"
    argv = [sys.executable, "-m", "bench.continuation", "--limit", "2", "--max-tokens", "16"]
    done = subprocess.run(
        [*argv, "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert set(document["rows"]) == set(ARMS)
    continued = [r for r in document["rows"]["cut_1"] if r["cut"] is not None]
    assert continued and all(r["continued_by"] == "local" for r in continued)
