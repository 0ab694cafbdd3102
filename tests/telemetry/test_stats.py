"""Stats: seed 003's derived metrics, sliding windows and alerts, on a controlled clock."""

from __future__ import annotations

import pytest

from app.config import AlertConfig, Strategy
from app.routing.acceptance import Acceptance
from app.telemetry.stats import Outcome, RequestRecord, Stats


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def verified(
    n: int, accepted: int, outcome: Outcome = Outcome.SPILLED_OVER, context: str = "prose"
) -> RequestRecord:
    acceptance = Acceptance(n, accepted, -1 if accepted == n else accepted, None)
    return RequestRecord(
        strategy=Strategy.SPECULATIVE, outcome=outcome, acceptance=acceptance, context_type=context
    )


def test_seed_003_definitions() -> None:
    stats = Stats(clock=Clock())
    for rec in (verified(4, 4), verified(4, 2), verified(2, 0, Outcome.VERIFIED_DRAFT_USED)):
        stats.record(rec)
    stats.record(RequestRecord(strategy=Strategy.SPECULATIVE, outcome=Outcome.ACCEPTED))
    spec = stats.get_metrics()["speculation"]
    assert spec["num_drafts"] == 3  # the unverified draft has no acceptance to count
    assert (spec["num_draft_tokens"], spec["num_accepted_tokens"]) == (10, 6)
    assert spec["acceptance_rate"] == 0.6
    assert spec["mean_acceptance_length"] == 3.0  # 1 + 6 / 3
    assert spec["num_accepted_tokens_per_pos"] == [2, 2, 1, 1]
    assert spec["per_position_acceptance_rate"] == [0.6667, 0.6667, 0.3333, 0.3333]


def test_windows_forget_old_events() -> None:
    clock = Clock()
    stats = Stats(clock=clock)
    stats.record(verified(4, 0))
    clock.now += 100  # out of the 30 s window, inside 5 min
    stats.record(verified(4, 4))
    windows = stats.get_metrics()["windows"]
    assert windows["30s"]["num_drafts"] == 1 and windows["30s"]["acceptance_rate"] == 1.0
    assert windows["5m"]["num_drafts"] == 2 and windows["5m"]["acceptance_rate"] == 0.5
    assert windows["30s"]["accepted_tokens_per_s"] == round(4 / 30, 3)
    clock.now += 400
    metrics = stats.get_metrics()
    assert metrics["windows"]["5m"]["requests"] == 0
    assert metrics["speculation"]["num_drafts"] == 2  # the whole-run totals keep everything


def test_per_context_type_breakdown() -> None:
    stats = Stats(clock=Clock())
    stats.record(verified(4, 4, context="code"))
    stats.record(verified(4, 0, context="math"))
    by_type = stats.get_metrics()["by_context_type"]
    assert by_type["code"]["acceptance_rate"] == 1.0 and by_type["code"]["requests"] == 1
    assert by_type["math"]["acceptance_rate"] == 0.0


def test_alerts_need_evidence_then_fire() -> None:
    clock = Clock()
    stats = Stats(AlertConfig(min_drafts=5), clock=clock)
    for _ in range(4):
        stats.record(verified(4, 0))
    assert stats.get_metrics()["alerts"] == []
    stats.record(verified(4, 0))
    names = {a["alert"] for a in stats.get_metrics()["alerts"]}
    assert names == {"low_acceptance_rate", "speculation_not_paying"}


def test_spill_rate_jump_alert() -> None:
    clock = Clock()
    stats = Stats(AlertConfig(min_drafts=5, spill_rate_jump=0.3), clock=clock)
    for _ in range(20):
        stats.record(verified(4, 4, Outcome.VERIFIED_DRAFT_USED))
    clock.now += 60
    for _ in range(10):
        stats.record(verified(4, 4, Outcome.SPILLED_OVER))
    jump = [a for a in stats.get_metrics()["alerts"] if a["alert"] == "spill_over_rate_jump"]
    assert jump and jump[0]["value"] == pytest.approx(1 - 10 / 30, abs=1e-3)
