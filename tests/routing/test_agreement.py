"""Fact-aware agreement: the facts that decide correctness must match; the surface need not."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.agreement import agree
from app.routing.merge import merge
from app.vocabulary import AgreementMode

# (draft, verified, question, agrees, reason): each row one rule, from the cases.
TABLE = [
    ("12 times 7 is 72.", "12 times 7 is 84.", "What is 12 times 7?", False, "numbers_differ"),
    ("84", "12 times 7 is 84.", "What is 12 times 7?", True, "same_facts"),
    ("Twelve times seven is eighty-four.", "84", "What is 12 times 7?", True, "same_facts"),
    (
        '"apple" has 6 letters.',
        '"apple" has 5 letters.',
        "Letters in apple?",
        False,
        "numbers_differ",
    ),
    ("It is 5 km.", "It is 5 miles.", "How far is it?", False, "numbers_differ"),
    ("It is -3.", "It is 3.", "What is 2 minus 5?", False, "numbers_differ"),
    ("About 2.5", "2.5", "Half of 5?", True, "same_facts"),
    (
        "The capital of Brazil is Sao Paulo.",
        "The capital of Brazil is Brasília.",
        "What is the capital of Brazil?",
        False,
        "terms_missing",
    ),
    ("Brasilia.", "The capital of Brazil is Brasília.", "Capital of Brazil?", True, "same_facts"),
    (
        "Paris.",
        "The capital of France is Paris.",
        "What is the capital of France?",
        True,
        "same_facts",
    ),
    (
        "Plants absorb oxygen.",
        "Plants absorb carbon dioxide.",
        "What gas do plants absorb?",
        False,
        "terms_missing",
    ),
    (
        "Yes, it is.",
        "No, a tomato is a fruit.",
        "Is a tomato a vegetable?",
        False,
        "polarity_differs",
    ),
    ("No.", "No, it is not.", "Is the sun a planet?", True, "same_facts"),
    ("The sun is not a star.", "The sun is a star.", "What is the sun?", False, "polarity_differs"),
    (
        "It landed in 1969.",
        "Apollo 11 landed on the Moon in 1969.",
        "When did Apollo 11 land on the Moon?",
        True,
        "same_facts",
    ),
    ("In 1968.", "In 1969.", "When did Apollo 11 land?", False, "numbers_differ"),
    (
        "```python\nx = len('abc')  # count\n```",
        '```python\nx = len("abc")\n```',
        "How do I count characters?",
        True,
        "same_code",
    ),
    (
        "```python\nx = size('abc')\n```",
        '```python\nx = len("abc")\n```',
        "Count?",
        False,
        "code_differs",
    ),
]


@pytest.mark.parametrize(("draft", "verified", "question", "agrees", "reason"), TABLE)
def test_agreement_table(
    draft: str, verified: str, question: str, agrees: bool, reason: str
) -> None:
    found = agree(draft, verified, prompt=question)
    assert (found.agrees, found.reason) == (agrees, reason)


def test_the_merge_serves_only_a_draft_that_agrees_and_keeps_similarity() -> None:
    # ratio sees these as similar (0.875), the facts do not agree
    kwargs = dict(draft_complete=True, min_confidence=0.8, prompt="What is 12 times 7?")
    seed = merge("12 times 7 is 72.", "12 times 7 is 84.", mode=AgreementMode.SIMILARITY, **kwargs)
    facts = merge("12 times 7 is 72.", "12 times 7 is 84.", mode=AgreementMode.FACTS, **kwargs)
    assert seed.use_draft and seed.agreement is True
    assert not facts.use_draft and facts.agreement is False and facts.reason == "numbers_differ"
    assert facts.similarity == seed.similarity > 0.8
    # and a right answer said differently is served, where ratio sends it away
    short = merge(
        "Paris.",
        "The capital of France is Paris.",
        mode=AgreementMode.FACTS,
        draft_complete=True,
        min_confidence=0.8,
        prompt="Capital of France?",
    )
    assert short.use_draft and short.similarity < 0.5


def test_a_cut_draft_is_never_judged() -> None:
    cut = merge("84", "84", draft_complete=False, min_confidence=0.8, mode=AgreementMode.FACTS)
    assert not cut.use_draft and cut.agreement is None


_NAMES = st.sampled_from(["Paris", "Rome", "Berlin", "Madrid", "Lisbon", "Vienna", "Oslo"])
_FRAMES = st.sampled_from(
    ["The answer is {}.", "{}.", "It is {}, of course.", "I believe it is {}"]
)


@given(st.integers(-10_000, 10_000), st.integers(-10_000, 10_000), _FRAMES, _FRAMES)
def test_answers_differing_in_one_number_never_agree(a: int, b: int, f1: str, f2: str) -> None:
    if a == b:
        return
    assert not agree(f1.format(a), f2.format(b), prompt="What is the number?").agrees


@given(_NAMES, _NAMES, _FRAMES, _FRAMES)
def test_answers_naming_another_place_never_agree(a: str, b: str, f1: str, f2: str) -> None:
    if a == b:
        return
    assert not agree(f1.format(a), f2.format(b), prompt="Which city?").agrees


@given(st.integers(0, 10_000), _NAMES, _FRAMES, _FRAMES)
def test_the_same_facts_in_other_words_agree(n: int, name: str, f1: str, f2: str) -> None:
    assert agree(f1.format(n), f2.format(n), prompt="What is the number?").agrees
    assert agree(f1.format(name), f2.format(name), prompt="Which city?").agrees
