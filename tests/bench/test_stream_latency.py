"""bench/stream_latency.py: the summary arithmetic, and one small run on the real llama-server."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.routing_latency import FIRST_TOKEN_S
from bench.stream_latency import ARMS, markdown, summarise, variant

ROOT = Path(__file__).resolve().parents[2]


def test_summary_and_table() -> None:
    def row(ttft: float, total: float, cloud: bool, tokens: int) -> dict[str, object]:
        return {
            "ttft_s": ttft,
            "total_s": total,
            "cloud_served": cloud,
            "cloud_called": cloud,
            "cloud_tokens": tokens,
            "correct": cloud,
        }

    rows = [row(0.2, 0.3, True, 10), row(0.4, 1.1, False, 0)]
    summary = summarise(rows)
    assert (summary["ttft_p50_s"], summary["ttft_p90_s"]) == (0.2, 0.4)
    assert summary["total_mean_s"] == pytest.approx(0.7)
    assert (summary["cloud_served"], summary["cloud_tokens"], summary["quality"]) == (0.5, 5, 0.5)
    assert "| speculative | 0.200 s | 0.400 s | 0.700 s | 50.0% | 50.0% | 5.0 | 50.0% |" in (
        markdown({"speculative": summary})
    )


def test_a_variant_names_an_arm_and_the_settings_it_changes() -> None:
    assert variant("noTrust:stream_trust_score=null,stream_first_token_s=0.3") == (
        "noTrust",
        {"stream_trust_score": None, "stream_first_token_s": 0.3},
    )
    for bad in ("noTrust", ":hedge=off", "noTrust:hedge"):
        with pytest.raises(argparse.ArgumentTypeError):
            variant(bad)


@pytest.mark.real
def test_bench_streams_every_arm_on_the_real_llama_server(
    real_assets: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "stream.json"
    argv = [sys.executable, "-m", "bench.stream_latency", "--limit", "3", "--max-tokens", "32"]
    argv += ["--variant", "noTrust:stream_trust_score=null"]
    done = subprocess.run(
        [*argv, "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {*ARMS, "speculative:noTrust"}
    assert len(rows["speculative:noTrust"]) == 3
    assert all(r["cloud_called"] and r["cloud_tokens"] > 0 for r in rows["cloud_only"])
    assert not any(r["cloud_called"] for r in rows["local_only"])
    # under the shipped first-token budget every stream opens the cloud's stream at once
    assert all(r["cloud_called"] for r in rows["speculative"])
    # a streamed cloud answer cannot start before the stand-in's first chunk
    assert all(r["ttft_s"] >= FIRST_TOKEN_S for r in rows["cloud_only"])
    assert all(r["correct"] for r in rows["cloud_only"])  # the reference, streamed whole
    assert "| speculative |" in done.stdout
    assert "| speculative:noTrust |" in done.stdout
