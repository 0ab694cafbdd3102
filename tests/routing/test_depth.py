"""The adaptive-depth state machine (seed 001): bounds, the seed's steps, convergence, shifts."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.composition import depth_rule
from app.config import BudgetDepthConfig, ServerDepthConfig
from app.routing.depth import DepthController, DepthRule

SEED = depth_rule(ServerDepthConfig())  # k 4..24 from 8; code +8, math -4, json at most 6
CONTEXTS = ("prose", "code", "math", "json", "list")


@st.composite
def rules(draw: st.DrawFn) -> DepthRule:
    k_min = draw(st.integers(1, 16))
    k_max = draw(st.integers(k_min, 64))
    return DepthRule(
        k_min=k_min,
        k_max=k_max,
        k_start=draw(st.integers(1, 80)),
        target=draw(st.floats(0.11, 0.95)),
        interval=draw(st.integers(1, 128)),
        window=draw(st.integers(1, 256)),
        step_small=draw(st.integers(1, 4)),
        step_large=draw(st.integers(1, 8)),
        start_offsets={"code": draw(st.integers(-20, 20)), "math": draw(st.integers(-20, 20))},
        ceilings={"json": draw(st.integers(0, 30))},
    )


observations = st.lists(
    st.tuples(st.sampled_from(CONTEXTS), st.integers(-2, 40), st.integers(-2, 40)), max_size=200
)


def test_the_seeds_steps() -> None:
    assert [SEED.step(8, rate, "prose") for rate in (0.7, 0.6, 0.5, 0.4, 0.3)] == [
        (12, "high acceptance"),
        (10, "above target"),
        (8, "on target"),
        (6, "below target"),
        (4, "poor acceptance"),
    ]
    assert SEED.step(23, 0.9, "prose") == (24, "high acceptance")  # capped at k_max
    assert SEED.step(5, 0.0, "prose") == (4, "poor acceptance")  # floored at k_min


def test_the_seeds_context_heuristics_set_each_lane() -> None:
    controller = DepthController(SEED)
    starts = {c: controller.k(c) for c in CONTEXTS}
    assert starts == {"prose": 8, "code": 16, "math": 4, "json": 6, "list": 8}
    assert SEED.bounds("json") == (4, 6) and SEED.bounds("code") == (4, 24)


def test_each_lane_moves_on_its_own_evidence() -> None:
    controller = DepthController(SEED)
    change = controller.record("code", 64, 64)
    assert change is not None and (change.old, change.new) == (16, 20)
    assert change.reason == "high acceptance" and change.acceptance == 1.0
    assert controller.k("prose") == 8  # untouched
    assert controller.record("prose", 10, 63) is None  # interval (64 tokens) not reached yet
    assert controller.acceptance("prose") == pytest.approx(10 / 63)


@given(rules(), observations)
def test_k_stays_within_the_lane_bounds(rule: DepthRule, seen: list[tuple[str, int, int]]) -> None:
    controller = DepthController(rule)
    for context, accepted, drafted in seen:
        change = controller.record(context, accepted, drafted)
        low, high = rule.bounds(context)
        assert low <= controller.k(context) <= high
        if change is not None:
            assert change.new != change.old and 0 <= change.acceptance <= 1
    for context in CONTEXTS:
        low, high = rule.bounds(context)
        assert rule.k_min <= low <= controller.k(context) <= high <= max(rule.k_max, rule.k_min)


@given(rules(), st.integers(0, 20), st.integers(1, 20), st.sampled_from(CONTEXTS))
def test_converges_under_a_stationary_acceptance_rate(
    rule: DepthRule, accepted: int, drafted: int, context: str
) -> None:
    accepted = min(accepted, drafted)
    controller = DepthController(rule)
    start = controller.k(context)
    per_adjustment = math.ceil(rule.interval / drafted)
    moves = (rule.k_max - rule.k_min) // min(rule.step_small, rule.step_large) + 1
    trace = []
    for _ in range((moves + 1) * per_adjustment):
        controller.record(context, accepted, drafted)
        trace.append(controller.k(context))
    final = trace[-1]
    # It moved one way only and has settled: the last stretch never changes.
    assert trace == sorted(trace) or trace == sorted(trace, reverse=True)
    assert trace[-per_adjustment:] == [final] * per_adjustment
    low, high = rule.bounds(context)
    rate = accepted / drafted
    if rate > rule.target:
        assert final == high
    elif rate < rule.target - 0.1:
        assert final == low
    else:
        assert final == start


@given(rules(), st.sampled_from(CONTEXTS))
def test_reacts_to_a_shift_in_acceptance(rule: DepthRule, context: str) -> None:
    controller = DepthController(rule)
    low, high = rule.bounds(context)
    for _ in range(rule.interval * (high - low + 1)):
        controller.record(context, 1, 1)  # everything accepted: K climbs to the top
    assert controller.k(context) == high
    # Nothing accepted any more: once the window holds only the new evidence and an
    # adjustment is due, K must come down.
    for _ in range(rule.window + rule.interval):
        controller.record(context, 0, 1)
    assert controller.k(context) < high or high == low


def test_the_budget_knob_starts_at_max_draft_tokens() -> None:
    rule = depth_rule(BudgetDepthConfig(), k_start=128)
    controller = DepthController(rule)
    assert (controller.k("prose"), controller.k("code")) == (128, 192)
    assert rule.k_min == 16 and rule.k_max == 512


def test_a_bad_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="k_min <= k_max"):
        DepthRule(k_min=8, k_max=4)
    with pytest.raises(ValueError, match="cannot move both ways"):
        DepthRule(target=0.05)
    with pytest.raises(ValueError, match="at least 1"):
        DepthRule(interval=0)
