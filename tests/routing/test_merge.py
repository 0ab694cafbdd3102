"""similarity() and merge(): the draft is served only when complete and close enough."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.merge import merge, similarity


def test_identical_answers_are_fully_similar() -> None:
    assert similarity("Hello there!", "hello   THERE!", draft_complete=True) == 1.0


def test_truncated_draft_is_judged_on_the_verified_prefix() -> None:
    verified = "The capital of France is Paris, a city of about two million people."
    assert similarity("The capital of France", verified, draft_complete=False) == 1.0
    assert similarity("The capital of France", verified, draft_complete=True) < 0.5


@pytest.mark.parametrize(
    ("draft", "verified", "complete", "use_draft", "reason"),
    [
        (
            "Hello! How can I help you today?",
            "Hello! How can I help you today?",
            True,
            True,
            "similar_to_verified",
        ),
        (
            "The answer is 4.",
            "Photosynthesis turns light into sugar.",
            True,
            False,
            "differs_from_verified",
        ),
        ("The capital", "The capital of France is Paris.", False, False, "draft_truncated"),
    ],
)
def test_merge_outcomes(draft, verified, complete, use_draft, reason) -> None:
    result = merge(draft, verified, draft_complete=complete, min_confidence=0.8)
    assert (result.use_draft, result.reason) == (use_draft, reason)


@given(st.text(max_size=80), st.text(max_size=80), st.booleans())
def test_similarity_is_a_fraction(a: str, b: str, complete: bool) -> None:
    assert 0.0 <= similarity(a, b, draft_complete=complete) <= 1.0


@given(st.text(max_size=80), st.text(max_size=80), st.floats(0, 1))
def test_truncated_draft_never_served(a: str, b: str, threshold: float) -> None:
    assert not merge(a, b, draft_complete=False, min_confidence=threshold).use_draft


@given(st.text(max_size=80), st.text(max_size=80), st.floats(0, 1))
def test_complete_draft_served_iff_similar_enough(a: str, b: str, threshold: float) -> None:
    result = merge(a, b, draft_complete=True, min_confidence=threshold)
    assert result.use_draft is (result.similarity >= threshold)


@pytest.mark.parametrize(
    ("draft", "verified", "use_draft", "reason", "agreement"),
    [
        ('{"t": 25, "city": "Paris"}', '{"city": "Paris", "t": 21}', False, "json_differs", False),
        ('{"t": 21, "city": "Paris"}', '{"city":"Paris","t":21.0}', True, "same_json", True),
        # not JSON both: compared as text (and the facts, 21 in both, label it)
        ('{"t": 21}', "Here it is: {t: 21}", False, "differs_from_verified", True),
    ],
)
def test_json_output_agrees_by_its_value(draft, verified, use_draft, reason, agreement) -> None:
    result = merge(draft, verified, draft_complete=True, min_confidence=0.5, json_output=True)
    assert (result.use_draft, result.reason, result.agreement) == (use_draft, reason, agreement)
