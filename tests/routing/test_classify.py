"""classify(): seed 001's context types."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.classify import _CODE_WORDS, _LIST_WORDS, classify, prompt_text
from app.vocabulary import ContextType


@pytest.mark.parametrize(
    ("prompt", "kind"),
    [
        ("Write a Python function that reverses a list", ContextType.CODE),
        ("Fix this: ```x = [1, 2```", ContextType.CODE),
        ("for (i = 0; i < n; i++) { sum += a[i]; }", ContextType.CODE),
        ("What is 17 * 23?", ContextType.MATH),
        ("Give a proof that there are infinitely many primes", ContextType.MATH),
        ('{"type": "object", "properties": {}}', ContextType.JSON),
        ("Return the answer as JSON with keys name and age", ContextType.JSON),
        ("List three fruits", ContextType.LIST),
        ("- apples\n- pears\nwhich is sweeter?", ContextType.LIST),
        ("Tell me about the history of Paris", ContextType.PROSE),
        ("", ContextType.PROSE),
    ],
)
def test_classify(prompt: str, kind: ContextType) -> None:
    assert classify(prompt) is kind


def test_json_mode_wins() -> None:
    assert classify("Tell me about Paris", json_mode=True) is ContextType.JSON


def test_prompt_text_is_the_last_user_message() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "image_url"}]},
    ]
    assert prompt_text(messages) == "second "
    assert prompt_text([{"role": "system", "content": "x"}]) == ""


_WORDY = st.lists(
    st.sampled_from(["def", "Class", "PYTHON", "steps", "Bullet point", "list", "x", "_", "9", "-"])
    | st.text(alphabet=st.characters(max_codepoint=127), max_size=6),
    max_size=12,
).map(" ".join)


@given(_WORDY)
def test_word_search_on_ascii_text_finds_what_case_folding_finds(text: str) -> None:
    for words in (_CODE_WORDS, _LIST_WORDS):
        assert words.found(text, text.lower()) == (words.folded.search(text) is not None)


def test_word_search_on_other_text_folds_case() -> None:
    assert _CODE_WORDS.found("Écris du CODE", "écris du code")
    assert not _LIST_WORDS.found("Écris une phrase", "écris une phrase")
    # a long s folds to "s" but lowers to itself: only case folding finds "script" here
    assert _CODE_WORDS.found("un ſcript", "un ſcript")
