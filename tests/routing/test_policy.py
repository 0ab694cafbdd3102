"""decide(): every spill reason, alone and together, and the accept path."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.composition import build_policy
from app.config import SpeculativeConfig
from app.routing.features import FEATURES
from app.routing.policy import Policy, SpillReason, decide, likely_spill
from app.routing.scorer import Scorer, load_scorer
from app.routing.signals import ABORTED, DraftSignals, TokenSignal
from app.vocabulary import ContextType

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


# --- scored policies -------------------------------------------------------------------------

# Score = sigmoid(-log1p(chars)): the shorter the draft, the likelier it is wrong.
SHORTNESS = Scorer(
    name="shortness",
    features=("log_chars",),
    mean=(0.0,),
    scale=(1.0,),
    weights=(-1.0,),
    bias=0.0,
    threshold=0.5,
    spill_prior={"code": 0.9, "prose": 0.3},
)
SCORED = Policy(scorer=SHORTNESS, threshold=0.2)
ALWAYS_ACCEPT = Policy(scorer=replace(SHORTNESS, name="yes", bias=-100.0), threshold=0.5)
ALWAYS_SPILL = Policy(scorer=replace(SHORTNESS, name="no", bias=100.0), threshold=0.5)


def shortness(text: str) -> float:
    return 1.0 / (1.0 + math.exp(math.log1p(len(text.strip()))))


def test_a_policy_is_named_after_its_scorer() -> None:
    assert (POLICY.name, SCORED.name) == ("seed", "shortness")


@pytest.mark.parametrize("policy", [SCORED, ALWAYS_ACCEPT, ALWAYS_SPILL])
def test_a_draft_cut_at_the_budget_spills_unscored(policy: Policy) -> None:
    decision = decide(signals(n=10, finish="length"), policy)
    assert not decision.accept
    assert decision.reasons == (SpillReason.INCOMPLETE,)
    assert decision.details == ("incomplete: 10/10 tokens, cut at the draft budget",)
    assert decision.score is None and decision.features is None


@pytest.mark.parametrize("policy", [POLICY, SCORED, ALWAYS_ACCEPT])
def test_an_aborted_draft_spills_as_early_abort(policy: Policy) -> None:
    draft = signals(n=3, finish=ABORTED, probs=(0.9, 0.8, 0.004))
    decision = decide(draft, policy)
    assert not decision.accept
    assert decision.reasons == (SpillReason.EARLY_ABORT,)
    assert decision.details == (
        "early_abort: draft stopped early at token 3 (lowest token p 0.004)",
    )
    assert decision.score is None


def test_a_score_at_or_under_the_threshold_accepts_with_score_and_features() -> None:
    decision = decide(signals(text=LONG), SCORED, ContextType.CODE)
    assert decision.accept
    assert (decision.reasons, decision.details) == ((), ())
    assert decision.score == pytest.approx(shortness(LONG))
    assert decision.features is not None
    assert set(decision.features) == set(FEATURES)
    assert decision.features["ctx_code"] == 1.0
    # Exactly at the threshold is still an accept.
    at = Policy(scorer=SHORTNESS, threshold=decision.score)
    assert decide(signals(text=LONG), at).accept


def test_a_score_over_the_threshold_spills_naming_score_and_threshold() -> None:
    decision = decide(signals(text="Hi"), SCORED)  # sigmoid(-log 3) = 0.25 > 0.2
    assert not decision.accept
    assert decision.reasons == (SpillReason.LOW_CONFIDENCE,)
    assert decision.details == ("low_confidence: shortness score 0.25 > 0.20",)
    assert decision.score == pytest.approx(0.25)
    assert decision.features is not None and decision.features["log_chars"] == pytest.approx(
        math.log(3)
    )


def test_a_scored_policy_ignores_the_seed_rules() -> None:
    # Short, hedging and improbable: the seed would name four reasons; the scorer accepts.
    draft = signals(text="maybe", n=9, probs=(0.01,))
    assert len(decide(draft, POLICY).reasons) == 4
    assert decide(draft, ALWAYS_ACCEPT).accept


@given(text=st.text(max_size=200), threshold=st.floats(0.0, 1.0))
def test_scored_accept_exactly_when_score_is_at_most_threshold(text: str, threshold) -> None:
    decision = decide(signals(text=text), Policy(scorer=SHORTNESS, threshold=threshold))
    assert decision.score is not None
    # an empty answer is never served, whatever its score
    assert decision.accept is (decision.score <= threshold and bool(text.strip()))
    assert decision.accept is (decision.reasons == ())


def test_an_empty_answer_is_never_accepted_by_a_score() -> None:
    # even by a threshold every score is under (the gate's local lane: app.routing.gate)
    decision = decide(signals(text=" "), replace(ALWAYS_ACCEPT, threshold=1.0))
    assert not decision.accept and decision.reasons == (SpillReason.TOO_SHORT,)


@pytest.mark.parametrize(
    ("policy", "context", "min_prior", "likely"),
    [
        (POLICY, ContextType.CODE, 0.0, False),  # no scorer: no prior
        (SCORED, ContextType.JSON, 0.0, False),  # no prior for this context type
        (SCORED, ContextType.CODE, 0.8, True),
        (SCORED, "code", 0.9, True),  # at the minimum
        (SCORED, ContextType.CODE, 0.95, False),
        (SCORED, ContextType.PROSE, 0.8, False),
        (SCORED, ContextType.PROSE, 0.3, True),
    ],
)
def test_likely_spill_reads_the_scorer_prior(policy, context, min_prior, likely) -> None:
    assert likely_spill(policy, context, min_prior) is likely


def test_from_config_seed_has_no_scorer() -> None:
    policy = build_policy(SpeculativeConfig(policy="seed", hedge="off"))
    assert policy.scorer is None and policy.threshold == 0.5 and policy.name == "seed"


def test_from_config_picks_the_shipped_scorer_and_its_threshold() -> None:
    policy = build_policy(SpeculativeConfig(policy="combined"))
    shipped = load_scorer("combined")
    assert policy.scorer == shipped
    assert policy.name == "combined"
    assert policy.threshold == shipped.threshold


@pytest.mark.parametrize("threshold", [0.0, 0.3, 1.0])
def test_from_config_spill_threshold_overrides_the_scorer(threshold: float) -> None:
    config = SpeculativeConfig(policy="confidence", spill_threshold=threshold)
    policy = build_policy(config)
    assert policy.scorer == load_scorer("confidence")
    assert policy.threshold == threshold


def test_from_config_reads_a_scorer_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(replace(SHORTNESS, threshold=0.37).as_mapping()), encoding="utf-8")
    config = SpeculativeConfig(policy="combined", scorer_file=str(path))
    policy = build_policy(config)
    assert policy.scorer == replace(SHORTNESS, threshold=0.37)
    assert policy.name == "shortness"
    assert policy.threshold == 0.37
