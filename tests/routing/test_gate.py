"""The gate before the draft (app.routing.gate): cold-safe, lanes cut from the labels by
the quality target and the cloud's ceiling; properties by hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.features import FEATURES
from app.routing.gate import (
    MIN_CLOUD_LABELS,
    Gate,
    Lane,
    cloud_threshold,
    fit_thresholds,
    judged_in,
    lane_of,
)
from app.routing.policy import Policy, SpillReason, decide
from app.routing.request_features import SHAPE_FEATURES, request_features
from app.routing.scorer import Scorer
from app.routing.signals import DraftSignals, TokenSignal

ONES = tuple(1.0 for _ in SHAPE_FEATURES)
ZEROS = tuple(0.0 for _ in SHAPE_FEATURES)
REQUEST = request_features({"messages": [{"role": "user", "content": "What is 2 + 2?"}]})


def scorer(bias: float) -> Scorer:
    """A request-only scorer that gives every request sigmoid(bias)."""
    return Scorer("gate", SHAPE_FEATURES, ZEROS, ONES, ZEROS, bias)


def test_no_gate_is_the_uncertain_lane() -> None:
    assert lane_of(None, REQUEST) == (Lane.UNCERTAIN, None)
    assert lane_of(Gate(scorer(-5.0), local_at=0.5), None) == (Lane.UNCERTAIN, None)


def test_a_gate_without_thresholds_is_uncertain_everywhere() -> None:
    lane, p_wrong = lane_of(Gate(scorer(-5.0)), REQUEST)
    assert lane is Lane.UNCERTAIN and p_wrong == pytest.approx(0.0067, abs=1e-4)


@pytest.mark.parametrize(
    ("bias", "lane"),
    [(-5.0, Lane.LOCAL), (0.0, Lane.UNCERTAIN), (5.0, Lane.CLOUD)],
)
def test_the_thresholds_cut_three_lanes(bias: float, lane: Lane) -> None:
    gate = Gate(scorer(bias), local_at=0.1, cloud_from=0.9)
    assert lane_of(gate, REQUEST)[0] is lane


def test_a_gate_reads_the_request_only() -> None:
    draft = Scorer("x", (FEATURES[0],), (0.0,), (1.0,), (1.0,), 0.0)
    with pytest.raises(ValueError, match="request only"):
        Gate(draft)
    with pytest.raises(ValueError, match="above the local"):
        Gate(scorer(0.0), local_at=0.5, cloud_from=0.4)


def test_a_gate_round_trips_through_its_json_form() -> None:
    gate = Gate(scorer(1.0), local_at=0.05, cloud_from=0.97, labels=120)
    assert Gate.from_mapping(gate.as_mapping()) == gate
    with pytest.raises(ValueError, match="not a gate"):
        Gate.from_mapping({"local_at": 0.1})


def test_no_labels_no_lanes() -> None:
    assert fit_thresholds([], [], target=0.95, cloud_max_agreement=0.2) == (None, None)


def test_the_thresholds_come_from_the_labels() -> None:
    # 100 sure-right requests scored low, 100 mixed in the middle, 100 sure-wrong high
    scores = [i / 300 for i in range(300)]
    agreed = [i < 100 or (100 <= i < 200 and i % 2 == 0) for i in range(300)]
    local_at, cloud_from = fit_thresholds(scores, agreed, target=0.9, cloud_max_agreement=0.2)
    # the sure-right block and a few mixed ones after it (106 of 111 agree: 0.955)
    assert local_at is not None and scores[80] <= local_at <= scores[110]
    assert cloud_from is not None and scores[190] <= cloud_from <= scores[200]


def test_the_cloud_lane_needs_enough_labels() -> None:
    few = MIN_CLOUD_LABELS - 1
    assert cloud_threshold([0.9] * few, [False] * few, 0.2) is None
    many = MIN_CLOUD_LABELS + 10
    assert cloud_threshold([0.9] * many, [False] * many, 0.2) == 0.9


def test_few_labels_serve_nothing_locally() -> None:
    # 20 right of 20: the one-sided bound is still under 0.95
    local_at, _ = fit_thresholds([0.1] * 20, [True] * 20, target=0.95, cloud_max_agreement=0.2)
    assert local_at is None


LABELS = st.lists(st.tuples(st.floats(0, 0.5), st.booleans()), max_size=60)


@given(LABELS, st.integers(1, 60), st.integers(1, 200), st.floats(0.5, 1.0))
def test_more_labels_never_make_a_wrong_heavy_region_local(
    below: list[tuple[float, bool]], k: int, more: int, cut: float
) -> None:
    """Labels at or above ``cut`` all disagree: adding more of them never moves the local
    threshold into that region if it was not there, and whatever is served locally agrees
    at least as often as the target."""
    wrong = [(cut + (1 - cut) * i / (k + more), False) for i in range(k + more)]

    def local_at(n_wrong: int) -> float | None:
        labels = below + wrong[:n_wrong]
        scores, agreed = [s for s, _ in labels], [a for _, a in labels]
        threshold, _ = fit_thresholds(scores, agreed, target=0.9, cloud_max_agreement=0.2)
        if threshold is not None:
            served = [a for s, a in labels if s <= threshold]
            assert sum(served) / len(served) >= 0.9
        return threshold

    before, after = local_at(k), local_at(k + more)
    if before is None or before < cut:
        assert after is None or after < cut


@given(st.integers(11, 300))  # 10 of 10 wrong: the upper bound is still 0.21
def test_a_region_that_never_agrees_goes_to_the_cloud_once_labelled_enough(n: int) -> None:
    scores = [0.1] * 100 + [0.9] * n
    agreed = [True] * 100 + [False] * n
    _, cloud_from = fit_thresholds(scores, agreed, target=0.95, cloud_max_agreement=0.2)
    assert cloud_from == 0.9


def test_a_gap_between_the_kinds_stays_uncertain() -> None:
    # right drafts scored up to 0.3, wrong ones from 0.9: a request scored 0.5 is like
    # neither, so the cloud lane starts at the wrong ones, not at the last right one
    scores = [0.1] * 100 + [0.3] + [0.9] * 50
    agreed = [True] * 101 + [False] * 50
    _, cloud_from = fit_thresholds(scores, agreed, target=0.95, cloud_max_agreement=0.3)
    assert cloud_from == 0.9


KINDS = [(0.2, True), (0.5, True), (0.5, False), (0.7, True), (0.9, False)]


@given(st.tuples(*(st.integers(0, n) for n in (40, 10, 10, 3, 60))))
def test_the_cloud_lane_starts_at_a_label_that_disagreed(counts: tuple[int, ...]) -> None:
    # a few right labels just under a wrong-only top, and a tie group of both kinds
    labels = [kind for kind, n in zip(KINDS, counts, strict=True) for _ in range(n)]
    scores, agreed = [s for s, _ in labels], [a for _, a in labels]
    cloud_from = cloud_threshold(scores, agreed, 0.3)
    assert cloud_from is None or cloud_from in {s for s, a in labels if not a}


def test_the_cloud_lane_starts_above_a_local_lane_that_reaches_into_the_wrong_ones() -> None:
    # the target lets the local lane serve a few wrong drafts beside 500 right ones; the
    # cloud lane is then looked for above it, not given up
    scores = [i / 1000 for i in range(530)] + [0.5 + i / 200 for i in range(70)]
    agreed = [True] * 530 + [False] * 70
    local_at, cloud_from = fit_thresholds(scores, agreed, target=0.95, cloud_max_agreement=0.2)
    assert local_at is not None and local_at >= 0.5  # a few of the wrong ones are local
    assert cloud_from is not None and local_at < cloud_from <= 0.6


def draft(n: int = 5, finish: str = "stop") -> DraftSignals:
    tokens = tuple(TokenSignal(text="x", p=0.2, entropy=2.0) for _ in range(n))
    return DraftSignals(text="Paris.", n_tokens=n, budget=10, finish_reason=finish, tokens=tokens)


# a scorer sure every draft is wrong, and the learner's "no threshold holds the target"
DOUBTING = Scorer("doubting", (FEATURES[0],), (0.0,), (1.0,), (0.0,), 100.0)
UNHELD = Policy(scorer=DOUBTING, threshold=-1.0)


def test_the_local_lanes_bound_stands_in_while_no_judges_threshold_holds() -> None:
    assert not decide(draft(), UNHELD).accept  # outside the local lane: verified
    assert not decide(draft(), judged_in(Lane.UNCERTAIN, UNHELD)).accept
    local = judged_in(Lane.LOCAL, UNHELD)
    assert decide(draft(), local).accept  # the lane's bound holds the target for it
    cut = decide(draft(10, finish="length"), local)  # what no score excuses is still doubted
    assert not cut.accept and cut.reasons == (SpillReason.INCOMPLETE,)


def test_a_judges_threshold_that_holds_still_doubts_in_the_local_lane() -> None:
    held = Policy(scorer=DOUBTING, threshold=0.3)
    assert judged_in(Lane.LOCAL, held) is held
    assert not decide(draft(), judged_in(Lane.LOCAL, held)).accept
    assert judged_in(Lane.LOCAL, Policy()) == Policy()  # the seed's rules: no scores, as they are
