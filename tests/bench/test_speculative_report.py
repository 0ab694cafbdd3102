"""bench/speculative_report.py: the report's arithmetic on hand-made request records."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from bench.speculative_report import (
    RequestRecord,
    arm_order,
    build_report,
    group_stats,
    markdown,
    spread,
    verdict,
)


def rec(
    arm: str,
    context: str,
    tokens: int,
    wall_s: float,
    *,
    drafted: int = 0,
    accepted: int = 0,
    drafts: int = 0,
    per_pos: tuple[int, ...] = (),
    repeat: int = 0,
) -> RequestRecord:
    return RequestRecord(
        arm=arm,
        repeat=repeat,
        prompt_id=f"{context}-01",
        context_type=context,
        k=None if arm in ("vanilla", "ngram") else 8,
        wall_s=wall_s,
        tokens=tokens,
        draft_n=drafted,
        draft_n_accepted=accepted,
        drafts=drafts,
        accepted_per_pos=per_pos,
    )


def arms_at(rates: dict[str, tuple[float, float]]) -> list[RequestRecord]:
    """One second per request: arm -> (code tokens/s, prose tokens/s)."""
    return [
        rec(arm, context, int(rate), 1.0)
        for arm, pair in rates.items()
        for context, rate in zip(("code", "prose"), pair, strict=True)
    ]


def test_ratios_of_sums_over_a_group() -> None:
    records = [
        rec("K=8", "code", 60, 2.0, drafted=40, accepted=30, drafts=10, per_pos=(9, 8, 7)),
        rec("K=8", "code", 40, 3.0, drafted=10, accepted=5, drafts=5, per_pos=(4, 1)),
    ]
    s = group_stats(records)
    assert s["tokens_per_s"] == pytest.approx(100 / 5)  # not the mean of 30 and 13.3
    assert s["acceptance_rate"] == pytest.approx(35 / 50)
    assert s["mean_acceptance_length"] == pytest.approx(1 + 35 / 15)  # seed 003
    assert s["per_position"] == pytest.approx([13 / 15, 9 / 15, 7 / 15, 0, 0, 0, 0, 0])


def test_a_group_without_drafts_has_no_acceptance_figures() -> None:
    s = group_stats([rec("vanilla", "json", 10, 0.5)])
    assert s["tokens_per_s"] == 20.0
    assert (s["acceptance_rate"], s["mean_acceptance_length"], s["per_position"]) == (
        None,
        None,
        None,
    )


def test_spread_is_the_population_std_and_its_cv() -> None:
    assert spread([10.0, 30.0]) == {"std": 10.0, "cv": 0.5}
    assert spread([]) == {"std": None, "cv": None}


def test_arms_are_ordered_baselines_fixed_by_k_then_adaptive() -> None:
    assert arm_order(["adaptive", "K=16", "ngram", "K=4", "vanilla", "K=8"]) == [
        "vanilla",
        "ngram",
        "K=4",
        "K=8",
        "K=16",
        "adaptive",
    ]


def test_per_arm_report_speedup_variance_and_repeat_noise() -> None:
    records = [
        rec("vanilla", "code", 20, 1.0),
        rec("vanilla", "prose", 20, 1.0),
        rec("K=8", "code", 30, 1.0, drafted=8, accepted=6, drafts=2, repeat=0),
        rec("K=8", "prose", 50, 1.0, drafted=8, accepted=2, drafts=2, repeat=0),
        rec("K=8", "code", 30, 1.0, drafted=8, accepted=6, drafts=2, repeat=1),
        rec("K=8", "prose", 10, 1.0, drafted=8, accepted=2, drafts=2, repeat=1),
    ]
    report = build_report(records)
    assert report["contexts"] == ["code", "prose"]
    assert report["verdict"] is None  # no adaptive arm
    k8 = report["arms"]["K=8"]
    assert k8["all"]["tokens_per_s"] == 30.0 and k8["speedup"] == 1.5
    assert k8["by_context"]["code"]["tokens_per_s"] == 30.0
    assert k8["by_context"]["prose"]["acceptance_rate"] == 0.25
    assert k8["across_contexts"] == {"std": 0.0, "cv": 0.0}  # 30 and 30
    assert k8["per_repeat_tokens_per_s"] == [40.0, 20.0]
    assert k8["repeat_spread"] == {"min": 20.0, "max": 40.0}
    assert report["arms"]["vanilla"]["speedup"] == 1.0
    json.dumps(report)  # JSON-ready
    text = markdown(report)
    assert "| K=8 | 30.0 | 1.50x | 50.0% | 3.00 |" in text
    assert "| vanilla | 20.0 | 20.0 |" in text  # tokens/s per context type
    assert "seed 001 verdict" not in text


def test_verdict_faster_by_ten_percent() -> None:
    records = arms_at({"K=4": (40, 60), "K=8": (45, 45), "adaptive": (50, 61)})
    v = build_report(records)["verdict"]
    assert v["best_fixed"] == "K=4" and v["best_fixed_tokens_per_s"] == 50.0
    assert v["gain"] == pytest.approx(0.11)
    assert (v["faster"], v["holds"]) == (True, "faster")
    assert "HOLDS: >= 10% higher tokens/s" in v["statement"]


def test_verdict_same_speed_with_lower_variance() -> None:
    records = arms_at({"K=4": (40, 60), "K=8": (30, 50), "adaptive": (49, 51)})
    v = build_report(records)["verdict"]
    assert v["best_fixed"] == "K=4" and v["gain"] == pytest.approx(0.0)
    assert v["adaptive_cv"] == pytest.approx(0.02) and v["best_fixed_cv"] == pytest.approx(0.2)
    assert (v["faster"], v["steadier"], v["holds"]) == (False, True, "steadier")
    assert "HOLDS: the same tokens/s" in v["statement"]


def test_verdict_neither() -> None:
    slower_but_steady = arms_at({"K=8": (40, 60), "adaptive": (44, 46)})  # -10%, lower CV
    faster_but_uneven = arms_at({"K=8": (40, 60), "adaptive": (30, 74)})  # +4%, higher CV
    for records in (slower_but_steady, faster_but_uneven):
        v = build_report(records)["verdict"]
        assert (v["faster"], v["steadier"], v["holds"]) == (False, False, None)
        assert "NEITHER holds" in v["statement"]
        assert "seed 001 verdict: adaptive" in markdown(build_report(records))


def test_verdict_needs_adaptive_and_a_fixed_arm() -> None:
    report = build_report(arms_at({"K=8": (40, 60), "vanilla": (10, 10)}))
    with pytest.raises(ValueError):
        verdict(report["arms"])


def test_record_round_trips_through_json() -> None:
    r = rec("adaptive", "math", 5, 0.1, drafted=4, accepted=3, drafts=1, per_pos=(1, 1, 1))
    assert RequestRecord.from_mapping(json.loads(json.dumps(asdict(r)))) == r
