"""decide(): every spill reason, alone and together, and the accept path."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.policy import Policy, SpillReason, decide
from app.routing.signals import DraftSignals, TokenSignal

LONG = "Paris is the capital of France, and it is also its largest city."
POLICY = Policy()


def signals(
    text: str = LONG, n: int = 5, budget: int = 10, finish: str = "stop", probs: tuple = (0.9,) * 5
) -> DraftSignals:
    tokens = tuple(TokenSignal(text="x", p=p, entropy=0.1) for p in probs)
    return DraftSignals(text=text, n_tokens=n, budget=budget, finish_reason=finish, tokens=tokens)


@pytest.mark.parametrize(
    ("draft", "expected"),
    [
        (signals(), ()),
        (signals(finish="length"), (SpillReason.INCOMPLETE,)),
        (signals(n=9), (SpillReason.INCOMPLETE,)),  # 9 >= 0.9 * 10
        (signals(n=8), ()),
        (signals(text="Hello!"), (SpillReason.TOO_SHORT,)),
        (signals(text=LONG + " I think so."), (SpillReason.UNCERTAINTY_MARKER,)),
        (signals(text=LONG + " MAYBE."), (SpillReason.UNCERTAINTY_MARKER,)),
        (signals(text=LONG + " Well..."), (SpillReason.UNCERTAINTY_MARKER,)),
        (signals(probs=(0.4, 0.5, 0.45)), (SpillReason.LOW_CONFIDENCE,)),
        (signals(probs=(0.99, 0.99, 0.01)), (SpillReason.LOW_CONFIDENCE,)),
        (signals(probs=()), ()),  # no logprobs: the confidence rule cannot judge
        (
            signals(text="maybe", finish="length", probs=(0.1,)),
            (
                SpillReason.INCOMPLETE,
                SpillReason.TOO_SHORT,
                SpillReason.UNCERTAINTY_MARKER,
                SpillReason.LOW_CONFIDENCE,
            ),
        ),
    ],
)
def test_decide_names_every_reason(draft: DraftSignals, expected: tuple) -> None:
    decision = decide(draft, POLICY)
    assert decision.reasons == expected
    assert decision.accept == (not expected)
    assert len(decision.details) == len(expected)


def test_thresholds_come_from_the_policy() -> None:
    lenient = Policy(
        short_draft_chars=0, uncertainty_markers=(), min_mean_token_prob=0.0, min_token_prob=0.0
    )
    assert decide(signals(text="maybe", probs=(0.01,)), lenient).accept


@given(
    text=st.text(max_size=200),
    n=st.integers(0, 100),
    budget=st.integers(1, 100),
    finish=st.sampled_from(["stop", "length", None]),
    probs=st.lists(st.floats(0.0, 1.0), max_size=20),
)
def test_accept_exactly_when_no_reason(text, n, budget, finish, probs) -> None:
    draft = signals(text=text, n=n, budget=budget, finish=finish, probs=tuple(probs))
    decision = decide(draft, POLICY)
    assert decision.accept is (decision.reasons == ())
    if finish == "length":
        assert SpillReason.INCOMPLETE in decision.reasons
