"""The guarded refit on its own (``app.learning.refit``): what it fits on, what it holds
back, and when its candidate may replace the current scorer."""

from __future__ import annotations

from dataclasses import replace

from app.composition import build_policy
from app.config import LearningConfig, SpeculativeConfig
from app.learning.labels import Label
from app.learning.refit import Refit, fit_candidate, held_out_scores, refit
from app.learning.threshold import label_scores
from app.routing.features import FEATURES
from app.routing.target import threshold_for
from tests.support.coin_tosses import memorable

PRIOR = build_policy(SpeculativeConfig(policy="combined")).scorer
assert PRIOR is not None
CONFIG = LearningConfig(enabled=True, holdout=0.2)


def labels(n: int, agreed: list[bool] | None = None) -> list[Label]:
    """Drafts told apart by their mean log probability: sure ones agree."""
    out = []
    for i in range(n):
        right = agreed[i] if agreed is not None else i % 2 == 0
        features = dict.fromkeys(FEATURES, 0.0) | {"mean_logp": -0.05 if right else -2.0}
        out.append(Label(features, (), "prose", right))
    return out


def test_one_class_in_training_fits_nothing() -> None:
    assert refit(labels(20, [True] * 20), PRIOR, PRIOR, CONFIG) is None


def test_the_newest_share_is_held_back_and_the_candidate_is_named() -> None:
    found = refit(labels(50), PRIOR, PRIOR, CONFIG)
    assert found is not None and (found.train, found.held) == (40, 10)
    assert found.candidate.name == "learned"
    assert found.candidate.fitted_on == {"labels": 40, "holdout": 10, "auroc_holdout": found.new}
    assert found.new is not None and found.new >= 0.9  # the feature tells them apart


def test_a_candidate_replaces_only_when_not_worse_on_the_holdout() -> None:
    def refit_of(new: float | None, old: float | None) -> Refit:
        return Refit(PRIOR, new, old, 40, 10)

    assert refit_of(0.7, 0.6).better and refit_of(0.6, 0.6).better and refit_of(0.6, None).better
    assert not refit_of(0.5, 0.6).better and not refit_of(None, 0.6).better


def test_a_learned_scorer_is_judged_on_labels_it_did_not_see() -> None:
    """Fitted on coin tosses (held to the prior as shipped), a scorer ranks its own labels
    as if it knew them, so 0.8 seems to hold (on 180 of 300, whose agreement is 0.5);
    scored out of fold, they are what they are, and nothing holds."""
    found = memorable(300)
    config = LearningConfig(enabled=True)
    learned = fit_candidate(found, PRIOR, config)
    agreed = [lab.agreed for lab in found]
    assert threshold_for(label_scores(found, learned), agreed, 0.8).threshold is not None
    honest = held_out_scores(found, learned, PRIOR, config)
    assert threshold_for(honest, agreed, 0.8).threshold is None
    assert honest == held_out_scores(found, learned, PRIOR, config)  # the same folds again
    # the configured scorer saw none of them: its own scores are already honest
    assert held_out_scores(found, PRIOR, PRIOR, config) == label_scores(found, PRIOR)


def test_a_repeated_question_is_never_scored_by_a_fit_that_saw_it() -> None:
    """The same coin tosses, each question asked twice: folds by label would put one copy
    in training and score the other by it (0.8 then holds); folds by
    question do not."""
    found = memorable(300)
    twice = found + found
    config = LearningConfig(enabled=True)
    learned = fit_candidate(twice, PRIOR, config)
    honest = held_out_scores(twice, learned, PRIOR, config)
    assert threshold_for(honest, [lab.agreed for lab in twice], 0.8).threshold is None


def test_a_fold_with_nothing_to_fit_is_scored_by_the_prior() -> None:
    # four questions: three agree, one does not; the fold holding the one that does not
    # has only agreeing labels to fit on, so the prior (which saw none) scores it
    few = [*labels(3, [True] * 3), *labels(1, [False])]
    few = [replace(lab, ngrams=(i,)) for i, lab in enumerate(few)]
    config = LearningConfig(enabled=True)
    learned = fit_candidate(labels(20), PRIOR, config)
    honest = held_out_scores(few, learned, PRIOR, config)
    assert honest[3] == label_scores(few[3:], PRIOR)[0]
    assert len(honest) == 4
