"""The near hits' fact guard: case, spacing and punctuation variants match; a question that
differs in a number, a negation, a quoted literal or a name never does (hypothesis)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from app.cache.guard import near_match, normalize, same_facts, text_facts

WORDS = st.sampled_from(
    ["what", "is", "the", "sum", "of", "and", "times", "capital", "how", "many", "days", "in"]
)
NAMES = st.sampled_from(["Paris", "London", "Ada", "Turing", "Python", "Rust", "Mars", "Tokyo"])
NUMBERS = st.integers(min_value=0, max_value=10**6).map(str) | st.decimals(
    min_value=0, max_value=1000, places=2, allow_nan=False, allow_infinity=False
).map(str)


@st.composite
def questions(draw: st.DrawFn) -> tuple[list[str], str]:
    """A question as words around one slot (``{}``) for a fact."""
    before = draw(st.lists(WORDS, min_size=1, max_size=5))
    after = draw(st.lists(WORDS, min_size=0, max_size=4))
    return [*before, "{}", *after], draw(st.sampled_from(["?", ".", "", "!"]))


def render(words: list[str], fact: str, end: str) -> str:
    return " ".join(words).replace("{}", fact) + end


@st.composite
def variant(draw: st.DrawFn, text: str) -> str:
    """``text`` in other case, spacing and final punctuation (quoted literals kept)."""
    pieces = re.split(r"(\"[^\"]*\")", text)
    out = []
    for piece in pieces:
        if piece.startswith('"'):
            out.append(piece)
            continue
        case = draw(st.sampled_from([str.lower, str.upper, str.title, str]))
        spaced = re.sub(r" ", lambda _: " " * draw(st.integers(1, 3)), case(piece))
        out.append(spaced)
    end = draw(st.sampled_from(["", "?", " ?", ".", "!", "  "]))
    return draw(st.sampled_from(["", " ", "\t"])) + "".join(out).rstrip("?.! ") + end


@given(questions(), NUMBERS, NUMBERS)
def test_a_different_number_never_matches(q: tuple[list[str], str], a: str, b: str) -> None:
    words, end = q
    if a != b:
        assert not near_match(render(words, a, end), render(words, b, end))
        assert not same_facts(render(words, a, end), render(words, b, end))


@given(questions(), st.sampled_from(["not", "never", "no", "without", "don't", "isn't"]))
def test_a_negation_never_matches(q: tuple[list[str], str], negation: str) -> None:
    words, end = q
    with_it, without = render(words, negation, end), render(words, "", end)
    assert not near_match(with_it, without)
    assert not same_facts(with_it, without)


@given(questions(), st.text("abcXYZ", min_size=1, max_size=6), st.text("abcXYZ", min_size=1))
def test_a_different_quoted_literal_never_matches(q: tuple[list[str], str], a: str, b: str) -> None:
    words, end = q
    if a != b:  # 'abc' and 'ABC' are different literals: case counts inside quotes
        assert not near_match(render(words, f'"{a}"', end), render(words, f'"{b}"', end))


@given(questions(), NAMES, NAMES)
def test_a_different_name_never_matches(q: tuple[list[str], str], a: str, b: str) -> None:
    words, end = q
    if a != b:
        assert not near_match(render(words, a, end), render(words, b, end))
        assert not same_facts(render(words, a, end), render(words, b, end))


@given(st.data(), questions(), NUMBERS | NAMES | st.just('"Exact"') | st.just("not"))
def test_case_spacing_and_punctuation_variants_match(
    data: st.DataObject, q: tuple[list[str], str], fact: str
) -> None:
    words, end = q
    text = render(words, fact, end)
    other = data.draw(variant(text))
    assert near_match(text, other), (text, other)


def test_the_issues_examples() -> None:
    assert not near_match("What is 12 times 7?", "What is 12 times 8?")
    assert not near_match("Is 12.5 more than 3?", "Is 125 more than 3?")
    assert not near_match("Add 12, 5", "Add 12,5")  # alike once spaced, not the same numbers
    assert not near_match('Print "Hello"', 'print "hello"')
    assert near_match("What is the capital of France?", "  what is the CAPITAL of france ")
    assert near_match("List: a , b ,c.", "list:a,b,c")


def test_the_facts_read() -> None:
    facts = text_facts("Don't add -3 to 1,000 without 'Foo' in Paris")
    assert facts.numbers == ("-3", "1,000")
    assert facts.negations == ("n't", "without")
    assert facts.quoted == ("Foo",)
    assert {"paris", "foo", "don't"} <= facts.names


def test_normalize() -> None:
    assert normalize("  Hello ,  World ! ") == "hello,world"
    assert normalize("ＡＢＣ?") == "abc"  # compatibility forms fold
