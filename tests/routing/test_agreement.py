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
    ("No.", "No, it is not.", "Is the sun a planet?", True, "same_polarity"),
    # a yes/no answer is its polarity; the reasons around it are not the answer
    (
        "No, 21 is not a prime number: it has other divisors.",
        "No, 21 = 3 × 7.",
        "Is 21 a prime number? Answer yes or no.",
        True,
        "same_polarity",
    ),
    ("False. It is slow.", "True.", "True or false: light is fast.", False, "polarity_differs"),
    # a choice: the draft must pick the verified option, and only it
    ("1/2 is larger than 1/3.", "1/2", "Which is larger, 1/2 or 1/3?", True, "same_choice"),
    (
        "February has more days than March.",
        "March has more days.",
        "Which has more days, February or March?",
        False,
        "choice_differs",
    ),
    (
        "An atom is 0.1 nm and a cell is 10 micrometres.",
        "Atom",
        "Which is smaller, an atom or a cell?",
        False,
        "choice_differs",
    ),
    (
        "Brazil is a country, not a city.",
        "Brazil is a country.",
        "Is Brazil a country or a city?",
        True,
        "same_choice",
    ),
    ("It is -3.", "-3 is greater than -7.", "Which is greater, -3 or -7?", True, "same_choice"),
    # a quoted literal holds to the letter
    (
        "It returns 'xyz' in capitals.",
        "'XYZ'",
        "What does 'xyz'.upper() return in Python?",
        False,
        "terms_missing",
    ),
    ("A `while` loop.", "for", "Which keyword starts a loop over a list?", False, "terms_missing"),
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
    # similarity serves it; the facts, the label either mode reports, say it disagrees
    assert seed.use_draft and seed.agreement is False
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


@given(_NAMES, _NAMES, st.booleans(), _FRAMES)
def test_a_choice_agrees_only_on_the_same_option(a: str, b: str, first: bool, frame: str) -> None:
    if a == b:
        return
    question = f"Which is closer, {a} or {b}?"
    verified = a if first else b
    assert agree(frame.format(verified), verified, prompt=question).agrees
    assert not agree(frame.format(b if first else a), verified, prompt=question).agrees
    both = frame.format(f"{a} and {b}")
    assert not agree(both, verified, prompt=question).agrees


@given(st.integers(0, 10_000), _NAMES, _FRAMES, _FRAMES)
def test_the_same_facts_in_other_words_agree(n: int, name: str, f1: str, f2: str) -> None:
    assert agree(f1.format(n), f2.format(n), prompt="What is the number?").agrees
    assert agree(f1.format(name), f2.format(name), prompt="Which city?").agrees
