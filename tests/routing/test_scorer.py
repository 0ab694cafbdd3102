"""Scorer: the logistic score, its JSON form, its validation, and the shipped scorers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.features import FEATURES, draft_features
from app.routing.scorer import Scorer, load_scorer
from app.routing.signals import DraftSignals, TokenSignal


def scorer(**overrides) -> Scorer:
    fields = {
        "name": "hand",
        "features": ("log_chars", "repetition"),
        "mean": (1.0, 0.5),
        "scale": (2.0, 0.25),
        "weights": (0.5, -1.0),
        "bias": 0.1,
        "threshold": 0.4,
        "spill_prior": {"code": 0.9, "prose": 0.25},
        "fitted_on": {"records": 12},
    }
    return Scorer(**{**fields, **overrides})


def mapping(**overrides) -> dict:
    return {**scorer().as_mapping(), **overrides}


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def test_score_is_the_logistic_of_the_standardised_dot_product() -> None:
    # z = 0.1 + 0.5 * (3 - 1) / 2 - 1 * (0.75 - 0.5) / 0.25 = -0.4
    score = scorer().score({"log_chars": 3.0, "repetition": 0.75, "marker": 1.0})
    assert score == pytest.approx(sigmoid(-0.4))
    assert score == pytest.approx(1.0 / (1.0 + math.exp(0.4)))


def test_features_the_scorer_does_not_use_are_ignored() -> None:
    s = scorer()
    base = {"log_chars": 2.0, "repetition": 0.1}
    assert s.score(base) == s.score({**base, "marker": 1.0, "min_logp": -20.0})


def test_a_missing_feature_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="repetition"):
        scorer().score({"log_chars": 1.0})


finite = st.floats(-1e12, 1e12, allow_nan=False)
weights = st.floats(-100.0, 100.0, allow_nan=False)
scales = st.floats(1e-3, 1e3)


@given(
    values=st.tuples(finite, finite),
    w=st.tuples(weights, weights),
    mean=st.tuples(finite, finite),
    scale=st.tuples(scales, scales),
    bias=weights,
)
def test_score_is_a_probability_and_never_overflows(values, w, mean, scale, bias) -> None:
    s = scorer(weights=w, mean=mean, scale=scale, bias=bias)
    score = s.score(dict(zip(s.features, values, strict=True)))
    assert 0.0 <= score <= 1.0


@given(value=finite, w=weights, bias=weights)
def test_score_is_strictly_inside_zero_one_when_z_is_moderate(value, w, bias) -> None:
    s = scorer(features=("log_chars",), mean=(0.0,), scale=(1.0,), weights=(w,), bias=bias)
    z = bias + w * value
    score = s.score({"log_chars": value})
    if abs(z) < 30:
        assert 0.0 < score < 1.0
        assert score == pytest.approx(sigmoid(z))


@pytest.mark.parametrize(
    ("value", "expected"), [(1e308, 1.0), (-1e308, 0.0), (math.inf, 1.0), (-math.inf, 0.0)]
)
def test_huge_features_saturate_without_overflow(value: float, expected: float) -> None:
    s = scorer(features=("log_chars",), mean=(0.0,), scale=(1e-3,), weights=(100.0,), bias=0.0)
    assert s.score({"log_chars": value}) == expected


@given(a=finite, b=finite, w=st.floats(1e-3, 100.0), other=finite)
def test_score_rises_with_a_feature_of_positive_weight(a, b, w, other) -> None:
    s = scorer(weights=(w, -1.0))
    low, high = sorted((a, b))
    assert s.score({"log_chars": low, "repetition": other}) <= s.score(
        {"log_chars": high, "repetition": other}
    )


def test_mapping_round_trip_keeps_everything() -> None:
    original = scorer()
    again = Scorer.from_mapping(json.loads(json.dumps(original.as_mapping())))
    assert again == original
    assert again.spill_prior == {"code": 0.9, "prose": 0.25}
    assert again.fitted_on == {"records": 12}
    assert again.as_mapping() == original.as_mapping()


def test_from_mapping_defaults_threshold_and_prior() -> None:
    data = mapping()
    for key in ("threshold", "spill_prior", "fitted_on"):
        del data[key]
    s = Scorer.from_mapping(data)
    assert (s.threshold, s.spill_prior, s.fitted_on) == (0.5, {}, {})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mean": (1.0,)}, "features, mean, scale, weights differ"),
        ({"weights": (1.0, 2.0, 3.0)}, "features, mean, scale, weights differ"),
        (
            {"features": (), "mean": (), "scale": (), "weights": ()},
            "features, mean, scale, weights differ",
        ),
        ({"features": ("log_chars", "vibes")}, r"unknown feature\(s\) \['vibes'\]"),
        ({"scale": (1.0, 0.0)}, "every scale must be positive"),
        ({"scale": (-1.0, 1.0)}, "every scale must be positive"),
        ({"threshold": 1.01}, r"threshold must be in \[0, 1\]"),
        ({"threshold": -0.1}, r"threshold must be in \[0, 1\]"),
    ],
)
def test_invalid_scorers_are_refused_with_the_reason(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"scorer 'hand': {message}"):
        scorer(**overrides)
    with pytest.raises(ValueError, match=message):
        Scorer.from_mapping(mapping(**overrides))


@pytest.mark.parametrize("threshold", [0.0, 1.0])
def test_threshold_bounds_are_allowed(threshold: float) -> None:
    assert scorer(threshold=threshold).threshold == threshold


@pytest.mark.parametrize("key", ["name", "features", "mean", "scale", "weights", "bias"])
def test_a_missing_key_is_named(key: str) -> None:
    data = mapping()
    del data[key]
    with pytest.raises(ValueError, match=f"not a scorer file: missing or malformed '{key}'"):
        Scorer.from_mapping(data)


def test_a_malformed_value_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a scorer file"):
        Scorer.from_mapping(mapping(mean=None))


def test_load_scorer_by_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(scorer().as_mapping()), encoding="utf-8")
    assert load_scorer(path) == scorer()
    assert load_scorer(str(path)) == scorer()


def test_load_scorer_refuses_an_unreadable_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot read scorer .*missing\.json"):
        load_scorer(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="cannot read scorer 'no-such-shipped-scorer'"):
        load_scorer("no-such-shipped-scorer")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is not valid JSON"),
        ("", "is not valid JSON"),
        ("[1, 2]", "not a scorer file"),
        ('{"name": "x"}', "not a scorer file: missing or malformed 'features'"),
    ],
)
def test_load_scorer_refuses_a_file_that_is_not_a_scorer(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_scorer(path)


@pytest.mark.parametrize("name", ["confidence", "combined"])
def test_shipped_scorers_load_and_use_known_features(name: str) -> None:
    s = load_scorer(name)
    assert s.name == name
    assert s.features and set(s.features) <= set(FEATURES)
    assert 0.0 <= s.threshold <= 1.0
    assert all(0.0 <= p <= 1.0 for p in s.spill_prior.values())
    empty = DraftSignals(text="", n_tokens=0, budget=10, finish_reason="stop")
    sure = DraftSignals(
        text="Paris is the capital of France.",
        n_tokens=2,
        budget=10,
        finish_reason="stop",
        tokens=(TokenSignal("Paris", 0.99, 0.01), TokenSignal(" is", 0.95, 0.1)),
    )
    for d in (empty, sure):
        score = s.score(draft_features(d, markers=("maybe",), context_type="prose"))
        assert 0.0 < score < 1.0


def test_the_confidence_scorer_reads_only_logprob_features() -> None:
    from app.routing.features import LOGPROB_FEATURES

    assert set(load_scorer("confidence").features) <= set(LOGPROB_FEATURES)
