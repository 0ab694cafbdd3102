"""token_acceptance(): seed 000's verify block from two texts of different tokenizers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.acceptance import token_acceptance

pieces = st.lists(st.text(alphabet="ab \n", min_size=1, max_size=4), max_size=12)


@pytest.mark.parametrize(
    ("draft", "verified", "accepted", "rej_pos", "target"),
    [
        (["Hello", " world", "!"], "Hello world! How are you?", 3, -1, None),
        (["Hello", " there", "!"], "Hello world!", 1, 1, " world"),
        (["The", " cap"], "  The\n capital of France", 2, -1, None),  # spacing differs
        (["Paris", "."], "Lyon.", 0, 0, "Lyon"),
        (["Hi"], "", 0, 0, None),
        ([], "anything", 0, -1, None),
    ],
)
def test_examples(draft, verified, accepted, rej_pos, target) -> None:
    result = token_acceptance(draft, verified)
    assert (result.n_drafted, result.n_accepted, result.rej_pos, result.target) == (
        len(draft),
        accepted,
        rej_pos,
        target,
    )


@given(pieces, st.text(max_size=20))
def test_verified_continuing_the_draft_accepts_everything(draft: list[str], rest: str) -> None:
    result = token_acceptance(draft, "".join(draft) + rest)
    assert result.n_accepted == len(draft) and result.rej_pos == -1


@given(pieces, st.text(alphabet="abc \n", max_size=30))
def test_invariants(draft: list[str], verified: str) -> None:
    result = token_acceptance(draft, verified)
    assert 0 <= result.n_accepted <= result.n_drafted == len(draft)
    assert result.rej_pos == (-1 if result.n_accepted == len(draft) else result.n_accepted)
    # Acceptance is a prefix property: a shorter draft accepts min(k, n_accepted).
    for k in range(len(draft) + 1):
        assert token_acceptance(draft[:k], verified).n_accepted == min(k, result.n_accepted)
