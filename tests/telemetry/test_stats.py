"""Stats: seed 003's derived metrics, sliding windows and alerts, on a controlled clock."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config import AlertConfig
from app.pricing import Bill, Charge
from app.record import RequestRecord
from app.routing.acceptance import Acceptance
from app.telemetry.stats import Stats
from app.vocabulary import Outcome, Strategy


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


# --- several workers: state() of each, merged() into one ----------------------------------

EIGHTHS = st.integers(0, 8).map(lambda n: n / 8)  # exact in binary: sums in any order agree


@st.composite
def a_record(draw: st.DrawFn) -> RequestRecord:
    n = draw(st.integers(1, 6))
    acceptance = draw(
        st.none() | st.integers(0, n).map(lambda a: Acceptance(n, a, -1 if a == n else a, None))
    )
    return RequestRecord(
        strategy=draw(st.sampled_from(Strategy)),
        outcome=draw(st.sampled_from(Outcome)),
        stream=draw(st.booleans()),
        context_type=draw(st.sampled_from(["prose", "code", "math"])),
        acceptance=acceptance,
        similarity=draw(st.none() | EIGHTHS),
        local_tokens=draw(st.integers(0, 50)),
        cloud_tokens=draw(st.integers(0, 50)),
        draft_s=draw(st.none() | EIGHTHS),
        verify_s=draw(st.none() | EIGHTHS),
        total_s=draw(EIGHTHS),
        upstream_errors=draw(
            st.lists(st.sampled_from([("local", "timeout"), ("cerebras", "429")]))
        ),
        agreement=draw(st.none() | st.booleans()),
        audit=draw(st.booleans()),
        bill=draw(st.none() | a_bill()),
    )


@st.composite
def a_bill(draw: st.DrawFn) -> Bill:
    charge = st.builds(
        Charge,
        st.sampled_from(["local", "cerebras"]),
        st.sampled_from(["draft", "spill", "hedge_cancelled"]),
        EIGHTHS,
    )
    source = draw(st.sampled_from(["verified", "estimated", "none"]))
    return Bill(draw(st.lists(charge, max_size=3)), draw(EIGHTHS), source)


@given(
    st.lists(
        st.tuples(st.integers(0, 2), a_record(), st.sampled_from([0.0, 0.4, 1.0, 20.0, 200.0])),
        max_size=40,
    ),
    st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["401", "413"])), max_size=5),
)
def test_merged_workers_equal_one_process_that_saw_everything(
    events: list[tuple[int, RequestRecord, float]], refusals: list[tuple[int, str]]
) -> None:
    clock = Clock()
    whole = Stats(clock=clock)
    workers = [Stats(clock=clock) for _ in range(3)]
    for worker, rec, later in events:
        clock.now += later
        whole.record(rec)
        workers[worker].record(rec)
    for worker, status in refusals:
        whole.refused[status] += 1
        workers[worker].refused[status] += 1
    clock.now += 5
    # The states travel between processes as JSON.
    states = [orjson.loads(orjson.dumps(w.state())) for w in workers]
    assert Stats.merged(states, clock=clock).get_metrics() == whole.get_metrics()


def test_merged_uptime_starts_at_the_earliest_worker() -> None:
    clock = Clock()
    early = Stats(clock=clock)
    clock.now += 50
    late = Stats(clock=clock)
    late.record(verified(4, 4))
    clock.now += 10
    merged = Stats.merged([late.state(), early.state()], clock=clock).get_metrics()
    assert merged["uptime_s"] == 60.0
    assert merged["requests"]["total"] == 1


def test_latency_samples_pool_beyond_one_reservoir() -> None:
    clock = Clock()
    workers = [Stats(clock=clock), Stats(clock=clock)]
    for i, worker in enumerate(workers):
        for _ in range(2048):
            worker.record(RequestRecord(strategy=Strategy.LOCAL_ONLY, total_s=float(i)))
    latency = Stats.merged([w.state() for w in workers], clock=clock).get_metrics()["latency_ms"]
    assert latency["total"] == {"n": 4096, "p50": 0.0, "p95": 1000.0}


def test_state_leaves_out_seconds_past_the_longest_window() -> None:
    clock = Clock()
    stats = Stats(clock=clock)
    stats.record(verified(4, 4))
    clock.now += 301
    state = stats.state()
    # the one count per request, by (strategy, outcome, context type), stays
    assert state["seconds"] == [] and state["finished"] == [
        ["speculative_decoding", "spilled_over", "prose", 1]
    ]


def test_merging_nothing_is_an_empty_snapshot() -> None:
    metrics = Stats.merged([], clock=Clock()).get_metrics()
    assert metrics["requests"]["total"] == 0 and metrics["latency_ms"]["total"]["n"] == 0
