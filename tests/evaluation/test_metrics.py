"""Routing metrics (RouteLLM's PGR, APGR, CPT, plus AUROC): hand-computed tables and properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from app.evaluation.metrics import (
    Curve,
    apgr,
    auroc,
    cloud_share_at,
    cpt,
    oracle_curve,
    pgr_curve,
    random_curve,
    routing_curve,
    threshold_for_cloud_share,
)

approx = pytest.approx


def assert_points(curve: Curve, points: list[tuple[float, float]]) -> None:
    assert [c for c, _ in curve.points] == approx([c for c, _ in points])
    assert [v for _, v in curve.points] == approx([v for _, v in points])


# --- hand-computed examples -------------------------------------------------------------

# Perfect cloud; drafts 0 and 2 wrong; requests 1 and 2 tie at 0.5 and move together.
TIED_SCORES = [0.9, 0.5, 0.5, 0.1]
TIED_DRAFT = [False, True, False, True]
# Imperfect cloud: request 0's draft is right and the cloud would break it.
MIXED_SCORES = [3.0, 2.0, 1.0]
MIXED_DRAFT = [True, False, False]
MIXED_CLOUD = [False, True, True]


@pytest.mark.parametrize(
    ("scores", "draft", "cloud", "points"),
    [
        (TIED_SCORES, TIED_DRAFT, None, [(0, 0.5), (0.25, 0.75), (0.75, 1.0), (1, 1.0)]),
        (
            MIXED_SCORES,
            MIXED_DRAFT,
            MIXED_CLOUD,
            [(0, 1 / 3), (1 / 3, 0), (2 / 3, 1 / 3), (1, 2 / 3)],
        ),
        ([7.0, 7.0, 7.0], [True, False, False], None, [(0, 1 / 3), (1, 1.0)]),
        ([1.0], [True], [False], [(0, 1.0), (1, 0.0)]),
        ([-math.inf, math.inf], [False, False], None, [(0, 0.0), (0.5, 0.5), (1, 1.0)]),
    ],
    ids=["ties-perfect-cloud", "imperfect-cloud", "one-tie-group", "single", "infinities"],
)
def test_routing_curve_examples(scores, draft, cloud, points) -> None:
    assert_points(routing_curve(scores, draft, cloud), points)


@pytest.mark.parametrize(
    ("scores", "draft", "cloud", "pgr", "area", "cpts"),
    [
        (
            TIED_SCORES,
            TIED_DRAFT,
            None,
            [0, 0.5, 1, 1],
            0.25 * 0.25 + 0.5 * 0.75 + 0.25 * 1,  # 0.6875
            {0.0: 0.0, 0.5: 0.25, 0.8: 0.55, 1.0: 0.75},
        ),
        (
            MIXED_SCORES,
            MIXED_DRAFT,
            MIXED_CLOUD,
            [0, -1, 0, 1],
            -1 / 6,
            {0.0: 0.0, 0.5: 5 / 6, 1.0: 1.0},
        ),
    ],
    ids=["ties-perfect-cloud", "imperfect-cloud"],
)
def test_pgr_apgr_cpt_examples(scores, draft, cloud, pgr, area, cpts) -> None:
    curve = routing_curve(scores, draft, cloud)
    assert [v for _, v in pgr_curve(curve).points] == approx(pgr)
    assert apgr(curve) == approx(area)
    for target, share in cpts.items():
        assert cpt(curve, target) == approx(share), target


@pytest.mark.parametrize(
    ("draft", "cloud", "points", "area", "cpt50"),
    [
        # two fixable drafts first, then the two neutral ones
        (TIED_DRAFT, None, [(0, 0.5), (0.5, 1.0), (1, 1.0)], 0.75, 0.25),
        # fix the two wrong drafts, break the right one last; PGR overshoots to 2
        (MIXED_DRAFT, MIXED_CLOUD, [(0, 1 / 3), (2 / 3, 1.0), (1, 2 / 3)], 7 / 6, 1 / 6),
    ],
    ids=["perfect-cloud", "imperfect-cloud"],
)
def test_oracle_examples(draft, cloud, points, area, cpt50) -> None:
    curve = oracle_curve(draft, cloud)
    assert_points(curve, points)
    assert apgr(curve) == approx(area)
    assert cpt(curve, 0.5) == approx(cpt50)


def test_random_curve_is_the_straight_line() -> None:
    curve = random_curve(TIED_DRAFT)
    assert curve.points == ((0.0, 0.5), (1.0, 1.0))
    assert apgr(curve) == 0.5
    assert cpt(curve, 0.5) == 0.5


@pytest.mark.parametrize(
    ("share", "value"),
    [(0.0, 0.5), (0.125, 0.625), (0.25, 0.75), (0.5, 0.875), (1.0, 1.0)],
)
def test_value_at_interpolates(share: float, value: float) -> None:
    assert routing_curve(TIED_SCORES, TIED_DRAFT).value_at(share) == approx(value)


@pytest.mark.parametrize(
    ("scores", "wrong", "expected"),
    [
        (TIED_SCORES, [not ok for ok in TIED_DRAFT], 3.5 / 4),  # one tied pair counts half
        ([0.9, 0.8, 0.1, 0.0], [True, True, False, False], 1.0),
        ([0.9, 0.8, 0.1, 0.0], [False, False, True, True], 0.0),
        ([0.3, 0.3, 0.3], [True, False, True], 0.5),
        ([1.0, 2.0, 3.0], [True, True, True], None),
        ([1.0, 2.0], [False, False], None),
        ([], [], None),
    ],
    ids=["ties", "perfect", "reversed", "all-tied", "only-wrong", "only-right", "empty"],
)
def test_auroc_examples(scores, wrong, expected) -> None:
    result = auroc(scores, wrong)
    assert result == (None if expected is None else approx(expected))


@pytest.mark.parametrize(
    ("share", "threshold", "achieved"),
    [
        (0.0, 5.0, 0.0),
        (0.1, 5.0, 0.0),
        (0.2, 4.0, 0.2),
        (0.4, 4.0, 0.2),  # the tied pair at 4 would overshoot: it stays local whole
        (0.5, 4.0, 0.2),
        (0.6, 3.0, 0.6),
        (0.8, 1.0, 0.8),
        (1.0, -math.inf, 1.0),
    ],
)
def test_threshold_for_cloud_share_examples(
    share: float, threshold: float, achieved: float
) -> None:
    scores = [4.0, 1.0, 5.0, 3.0, 4.0]
    assert threshold_for_cloud_share(scores, share) == threshold
    assert cloud_share_at(scores, threshold) == approx(achieved)


def test_threshold_share_is_not_lost_to_rounding() -> None:
    scores = [float(i) for i in range(10)]
    assert cloud_share_at(scores, threshold_for_cloud_share(scores, 0.3)) == 0.3


# --- degenerate and invalid input -------------------------------------------------------


@pytest.mark.parametrize(
    ("draft", "cloud"),
    [
        ([True, True], None),  # perfect drafts: q_local == q_cloud == 1
        ([True, False], [True, False]),  # cloud no better than local
        ([False, False], [False, False]),
        ([True, False], [False, False]),  # cloud worse than local
    ],
    ids=["no-wrong-drafts", "same-answers", "all-wrong", "cloud-worse"],
)
def test_pgr_needs_the_cloud_to_beat_local(draft, cloud) -> None:
    curve = routing_curve([0.2, 0.1], draft, cloud)
    for compute in (pgr_curve, apgr, lambda c: cpt(c, 0.5)):
        with pytest.raises(ValueError, match="PGR undefined"):
            compute(curve)


@pytest.mark.parametrize(
    "call",
    [
        lambda: routing_curve([0.1, math.nan], [True, False]),
        lambda: routing_curve([], []),
        lambda: routing_curve([0.1, 0.2], [True]),
        lambda: routing_curve([0.1, 0.2], [True, False], [True]),
        lambda: oracle_curve([True, False], [True]),
        lambda: oracle_curve([]),
        lambda: random_curve([]),
        lambda: auroc([math.nan, 0.1], [True, False]),
        lambda: auroc([0.1], [True, False]),
        lambda: threshold_for_cloud_share([math.nan], 0.5),
        lambda: threshold_for_cloud_share([], 0.5),
        lambda: threshold_for_cloud_share([0.1], 1.5),
        lambda: threshold_for_cloud_share([0.1], -0.1),
        lambda: cloud_share_at([math.nan], 0.0),
        lambda: cloud_share_at([], 0.0),
        lambda: cpt(routing_curve(TIED_SCORES, TIED_DRAFT), 1.1),
        lambda: cpt(routing_curve(TIED_SCORES, TIED_DRAFT), -0.1),
        lambda: routing_curve(TIED_SCORES, TIED_DRAFT).value_at(1.5),
        lambda: Curve(((0.0, 1.0),)),
        lambda: Curve(((0.1, 0.0), (1.0, 1.0))),
        lambda: Curve(((0.0, 0.0), (0.9, 1.0))),
        lambda: Curve(((0.0, 0.0), (0.5, 0.5), (0.5, 0.7), (1.0, 1.0))),
        lambda: Curve(((0.0, 0.0), (1.0, math.nan))),
    ],
)
def test_invalid_input_is_refused(call) -> None:
    with pytest.raises(ValueError):
        call()


# --- properties -------------------------------------------------------------------------

# Scores from a small set so that ties are common.
score_values = st.sampled_from([-2.0, -1.0, 0.0, 0.5, 1.0, 3.0])


@st.composite
def requests(
    draw: st.DrawFn, perfect_cloud: bool = False
) -> tuple[list[float], list[bool], list[bool]]:
    n = draw(st.integers(min_value=1, max_value=25))
    scores = draw(st.lists(score_values, min_size=n, max_size=n))
    draft = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    cloud = [True] * n if perfect_cloud else draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return scores, draft, cloud


def has_gap(draft: list[bool], cloud: list[bool]) -> bool:
    return sum(cloud) > sum(draft)


TOL = 1e-9


@given(requests())
def test_curve_runs_from_local_to_cloud_with_one_point_per_distinct_score(data) -> None:
    scores, draft, cloud = data
    n = len(scores)
    curve = routing_curve(scores, draft, cloud)
    assert curve.points[0] == (0.0, sum(draft) / n)
    assert curve.points[-1] == (1.0, sum(cloud) / n)
    shares = [c for c, _ in curve.points]
    assert shares == sorted(shares)
    assert len(curve.points) == len(set(scores)) + 1


@given(requests())
def test_oracle_apgr_is_an_upper_bound(data) -> None:
    scores, draft, cloud = data
    assume(has_gap(draft, cloud))
    assert apgr(oracle_curve(draft, cloud)) >= apgr(routing_curve(scores, draft, cloud)) - TOL
    assert apgr(oracle_curve(draft, cloud)) >= 0.5 - TOL


@given(requests())
def test_random_apgr_is_exactly_half(data) -> None:
    _, draft, cloud = data
    assume(has_gap(draft, cloud))
    assert apgr(random_curve(draft, cloud)) == 0.5


@pytest.mark.parametrize(
    "transform",
    [lambda s: 3 * s - 7, lambda s: 2.0**s, lambda s: s**3 + s, math.atan],
    ids=["affine", "exp2", "cubic", "atan"],
)
@given(data=requests())
def test_increasing_transform_changes_nothing(transform, data) -> None:
    scores, draft, cloud = data
    moved = [transform(s) for s in scores]
    curve = routing_curve(scores, draft, cloud)
    assert routing_curve(moved, draft, cloud) == curve
    wrong = [not ok for ok in draft]
    assert auroc(moved, wrong) == auroc(scores, wrong)
    if has_gap(draft, cloud):
        assert apgr(routing_curve(moved, draft, cloud)) == apgr(curve)


@given(requests())
def test_negated_score_flips_auroc(data) -> None:
    scores, draft, _ = data
    wrong = [not ok for ok in draft]
    forward, backward = auroc(scores, wrong), auroc([-s for s in scores], wrong)
    if forward is None:
        assert backward is None
    else:
        assert backward == approx(1 - forward)
        assert 0.0 <= forward <= 1.0


@given(st.lists(st.booleans(), min_size=2, max_size=30))
def test_perfect_separator_has_auroc_one(wrong: list[bool]) -> None:
    assume(0 < sum(wrong) < len(wrong))
    assert auroc([float(w) for w in wrong], wrong) == 1.0


@given(requests(), st.floats(0, 1), st.floats(0, 1))
def test_cpt_is_non_decreasing_in_target(data, x: float, y: float) -> None:
    scores, draft, cloud = data
    assume(has_gap(draft, cloud))
    curve = routing_curve(scores, draft, cloud)
    low, high = sorted((x, y))
    assert cpt(curve, low) <= cpt(curve, high) + TOL


@given(requests(), st.floats(0, 1))
def test_oracle_cpt_is_a_lower_bound(data, target: float) -> None:
    scores, draft, cloud = data
    assume(has_gap(draft, cloud))
    oracle = cpt(oracle_curve(draft, cloud), target)
    assert oracle <= cpt(routing_curve(scores, draft, cloud), target) + TOL
    assert oracle <= cpt(random_curve(draft, cloud), target) + TOL


@given(requests(perfect_cloud=True))
def test_perfect_cloud_oracle_needs_exactly_the_wrong_drafts(data) -> None:
    _, draft, cloud = data
    assume(has_gap(draft, cloud))
    wrong_share = draft.count(False) / len(draft)
    assert cpt(oracle_curve(draft, cloud), 1.0) == approx(wrong_share)


@given(requests())
def test_cpt_lands_on_the_curve(data) -> None:
    scores, draft, cloud = data
    assume(has_gap(draft, cloud))
    pgr = pgr_curve(routing_curve(scores, draft, cloud))
    for target in (0.2, 0.5, 0.8):
        share = cpt(routing_curve(scores, draft, cloud), target)
        assert pgr.value_at(share) == approx(target) or share == 0.0


@given(st.lists(score_values, min_size=1, max_size=30), st.floats(0, 1))
def test_threshold_sends_the_share_up_to_one_tie_group(scores: list[float], share: float) -> None:
    n = len(scores)
    threshold = threshold_for_cloud_share(scores, share)
    achieved = cloud_share_at(scores, threshold)
    assert achieved <= share + TOL
    if achieved < 1.0:  # the next tie group (the one at the threshold) would overshoot
        assert achieved + scores.count(threshold) / n > share - TOL
    # the achieved share is a point of the routing curve
    curve = routing_curve(scores, [True] * n)
    assert any(abs(c - achieved) < TOL for c, _ in curve.points)
