"""draft_features(): one finite vector per draft, whatever the draft; repetition; margins."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.features import FEATURES, draft_features, repetition, token_margin
from app.routing.signals import DraftSignals, TokenSignal
from app.vocabulary import ContextType

MARKERS = ("...", "I think", "maybe")
FLOOR = math.log(1e-9)


def draft(
    text: str = "Paris is the capital of France.",
    tokens: tuple[TokenSignal, ...] = (),
    n: int | None = None,
    finish: str | None = "stop",
) -> DraftSignals:
    return DraftSignals(
        text=text,
        n_tokens=len(tokens) if n is None else n,
        budget=10,
        finish_reason=finish,
        tokens=tokens,
    )


def tok(p: float, entropy: float = 0.1, top_k: tuple = ()) -> TokenSignal:
    return TokenSignal(text="x", p=p, entropy=entropy, top_k=top_k)


def features(d: DraftSignals, context: ContextType | str = ContextType.PROSE) -> dict:
    return draft_features(d, markers=MARKERS, context_type=context)


probs = st.floats(0.0, 1.0)
token_signals = st.builds(
    tok,
    p=probs,
    entropy=st.floats(0.0, 5.0),
    top_k=st.lists(st.tuples(st.integers(0, 50), probs), max_size=5).map(tuple),
)


@given(
    text=st.text(max_size=200),
    tokens=st.lists(token_signals, max_size=12).map(tuple),
    n=st.integers(0, 10_000),
    context=st.sampled_from([*ContextType, "prose", "unknown"]),
)
def test_every_feature_is_present_and_finite_for_any_draft(text, tokens, n, context) -> None:
    vector = features(draft(text, tokens, n=n), context)
    assert set(vector) == set(FEATURES)
    assert all(math.isfinite(v) for v in vector.values())
    # the mean of equal values may land one ulp below them: compare with a hair of slack
    assert FLOOR <= vector["min_logp"] <= vector["mean_logp"] + 1e-12
    assert vector["mean_logp"] <= 0.0
    assert 0.0 <= vector["repetition"] < 1.0
    assert vector["marker"] in (0.0, 1.0)


def test_an_empty_draft_has_full_confidence_and_says_it_is_empty() -> None:
    vector = features(draft(text="", tokens=(), n=0))
    assert set(vector) == set(FEATURES)
    assert vector == {
        "mean_logp": 0.0,
        "min_logp": 0.0,
        "mean_entropy": 0.0,
        "max_entropy": 0.0,
        "mean_margin": 1.0,
        "min_margin": 1.0,
        "log_tokens": 0.0,
        "log_chars": 0.0,
        "repetition": 0.0,
        "marker": 0.0,
        "ctx_code": 0.0,
        "ctx_math": 0.0,
        "ctx_json": 0.0,
        "ctx_list": 0.0,
    }


@pytest.mark.parametrize(
    ("context", "hot"),
    [
        (ContextType.CODE, "ctx_code"),
        (ContextType.MATH, "ctx_math"),
        (ContextType.JSON, "ctx_json"),
        (ContextType.LIST, "ctx_list"),
        ("code", "ctx_code"),  # a plain string works as well as the enum
        ("json", "ctx_json"),
        (ContextType.PROSE, None),
        ("something-else", None),
    ],
)
def test_context_type_is_one_hot(context, hot) -> None:
    vector = features(draft(), context)
    ctx = {k: v for k, v in vector.items() if k.startswith("ctx_")}
    assert ctx == {k: float(k == hot) for k in ctx}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Paris is the capital.", 0.0),
        ("I think it is Paris.", 1.0),
        ("i THINK so", 1.0),  # case-insensitive
        ("Well...", 1.0),
        ("Maybe.", 1.0),
        ("", 0.0),
    ],
)
def test_hedged_flags_uncertainty_markers(text: str, expected: float) -> None:
    assert features(draft(text))["marker"] == expected


def test_length_features_are_log1p_of_tokens_and_stripped_chars() -> None:
    vector = features(draft(text="  abc  ", n=7))
    assert vector["log_tokens"] == pytest.approx(math.log(8))
    assert vector["log_chars"] == pytest.approx(math.log(4))  # "abc": surrounding blanks dropped


def test_token_features_average_and_extreme() -> None:
    tokens = (tok(0.5, entropy=0.2), tok(0.25, entropy=1.0))
    vector = features(draft(tokens=tokens))
    assert vector["mean_logp"] == pytest.approx((math.log(0.5) + math.log(0.25)) / 2)
    assert vector["min_logp"] == pytest.approx(math.log(0.25))
    assert vector["mean_entropy"] == pytest.approx(0.6)
    assert vector["max_entropy"] == pytest.approx(1.0)


@pytest.mark.parametrize("p", [0.0, 1e-12, 1e-300, 5e-324, 1e-9])
def test_log_probabilities_are_clamped_at_one_in_a_billion(p: float) -> None:
    vector = features(draft(tokens=(tok(p),)))
    assert vector["min_logp"] == pytest.approx(FLOOR)
    assert vector["mean_logp"] == pytest.approx(FLOOR)


def test_clamping_only_touches_the_tiny_token() -> None:
    vector = features(draft(tokens=(tok(1.0), tok(0.0))))
    assert vector["min_logp"] == pytest.approx(FLOOR)
    assert vector["mean_logp"] == pytest.approx(FLOOR / 2)


@pytest.mark.parametrize(
    ("token", "margin"),
    [
        (tok(0.7), 0.7),  # no candidates: the token's own p
        (tok(0.7, top_k=((1, 0.7),)), 0.7),  # one candidate: its p
        (tok(0.7, top_k=((1, 0.7), (2, 0.2), (3, 0.1))), 0.5),
        (tok(0.2, top_k=((2, 0.2), (1, 0.7), (3, 0.1))), 0.5),  # order does not matter
        (tok(0.4, top_k=(("a", 0.4), ("b", 0.4))), 0.0),  # a tie: no margin
    ],
)
def test_token_margin(token: TokenSignal, margin: float) -> None:
    assert token_margin(token) == pytest.approx(margin)


def test_margin_features_mix_tokens_with_and_without_candidates() -> None:
    tokens = (tok(0.9), tok(0.6, top_k=((1, 0.6), (2, 0.3))))
    vector = features(draft(tokens=tokens))
    assert vector["mean_margin"] == pytest.approx((0.9 + 0.3) / 2)
    assert vector["min_margin"] == pytest.approx(0.3)


@given(top_k=st.lists(st.tuples(st.integers(), probs), min_size=1, max_size=8))
def test_margin_is_between_zero_and_the_top_probability(top_k) -> None:
    margin = token_margin(tok(0.5, top_k=tuple(top_k)))
    assert 0.0 <= margin <= max(p for _, p in top_k)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0.0),
        ("word", 0.0),  # no bigram at all
        ("two words", 0.0),
        ("the cat sat on the mat", 0.0),  # "the" repeats, no bigram does
        ("a b a b a b", 1 - 2 / 5),  # 5 bigrams, 2 distinct
        ("A b a B", 1 - 2 / 3),  # case-insensitive: (a,b), (b,a), (a,b)
        ("la femme, la femme, la femme,", 1 - 2 / 5),
    ],
)
def test_repetition_is_the_share_of_repeated_bigrams(text: str, expected: float) -> None:
    assert repetition(text) == pytest.approx(expected)


def test_repetition_of_an_alternating_loop_is_exact() -> None:
    assert repetition("a b a b a b") == 0.6


@given(st.text(max_size=300))
def test_repetition_is_in_zero_one(text: str) -> None:
    assert 0.0 <= repetition(text) < 1.0


@given(st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=6), unique=True, max_size=40))
def test_distinct_words_never_repeat(words: list[str]) -> None:
    assert repetition(" ".join(words)) == 0.0
