"""The quality target's threshold rule (app.routing.target): pure, properties by hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.target import lower_bound, threshold_for


def test_no_labels_serve_nothing_locally() -> None:
    bound = threshold_for([], [], 0.9)
    assert bound.threshold is None and bound.served == 0 and bound.n == 0


def test_more_labels_narrow_the_bound() -> None:
    assert lower_bound(19, 20) < lower_bound(95, 100) < lower_bound(950, 1000) < 0.95


def test_the_threshold_stops_before_the_wrong_drafts() -> None:
    scores = [i / 200 for i in range(200)]
    agreed = [i < 150 for i in range(200)]  # the 50 highest P(wrong) disagree
    bound = threshold_for(scores, agreed, 0.95)
    assert bound.threshold is not None and bound.threshold >= scores[149]
    assert bound.lower is not None and bound.lower >= 0.95
    assert bound.served < 200


def test_a_lower_target_serves_more() -> None:
    scores = [i / 300 for i in range(300)]
    agreed = [(i * 7919) % 100 >= i // 3 for i in range(300)]  # wrong more often as P(wrong) grows
    served = [threshold_for(scores, agreed, t).served for t in (0.95, 0.85, 0.7)]
    assert served == sorted(served) and served[0] < served[-1]


def test_weights_count_as_fewer_trials() -> None:
    scores, agreed = [0.1] * 200, [True] * 200
    plain = threshold_for(scores, agreed, 0.9)
    weighted = threshold_for(scores, agreed, 0.9, weights=[1.0] * 199 + [1000.0])
    assert plain.threshold == 0.1 and weighted.threshold is None


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        threshold_for([0.1], [True, False], 0.9)
    with pytest.raises(ValueError):
        threshold_for([0.1], [True], 1.5)


@given(
    st.lists(st.tuples(st.floats(0, 1), st.booleans()), max_size=200),
    st.floats(0.5, 0.99),
)
def test_what_it_serves_holds_the_target(labels: list[tuple[float, bool]], target: float) -> None:
    scores = [s for s, _ in labels]
    agreed = [a for _, a in labels]
    bound = threshold_for(scores, agreed, target)
    if bound.threshold is None:
        return
    served = [a for s, a in labels if s <= bound.threshold]
    assert len(served) == bound.served
    assert sum(served) / len(served) >= target  # the estimate is above its lower bound
    assert bound.lower is not None and bound.lower >= target
