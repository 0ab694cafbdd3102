"""The guarded refit: a candidate scorer fitted on all but the newest labels, and whether
it may replace the current one (its AUROC on the labels held back is not lower); and the
labels' scores the target's threshold is chosen on, from scorers that never saw them.

A learned scorer scores the labels it was fitted on better than it will score the next
drafts: on the bench's eval traces its in-sample scores made 0.7 and 0.8 hold on 60-120
labels where out-of-fold scores held nothing, and the drafts then served agreed in 1 of 7
audits (docs/target.md). So ``held_out_scores`` scores each label by a scorer fitted the
same way on the other folds (cross-fitting, as the gate's thresholds are chosen).

Pure: the learner reads the store, calls these in its worker thread, and writes the
candidate when it is ``better``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from app.config import LearningConfig
from app.evaluation.metrics import auroc
from app.learning.fit import fit_scorer
from app.learning.labels import Label
from app.learning.threshold import label_scores
from app.routing.scorer import Scorer


@dataclass(frozen=True, slots=True)
class Refit:
    """A candidate (named ``learned``, ``fitted_on`` its counts and holdout AUROC) and the
    two AUROCs on the held-back labels: ``new`` its own, ``old`` the current scorer's."""

    candidate: Scorer
    new: float | None
    old: float | None
    train: int
    held: int

    @property
    def better(self) -> bool:
        """Not worse than the current scorer on the held-back labels."""
        return self.new is not None and (self.old is None or self.new >= self.old)


def refit(
    labels: Sequence[Label], current: Scorer, prior: Scorer, config: LearningConfig
) -> Refit | None:
    """Fit on all but the newest ``holdout`` share, held to ``prior`` by
    ``prior_strength``; None when the training labels are of one class only."""
    n_hold = max(int(len(labels) * config.holdout), 1)
    train, held = list(labels[:-n_hold]), list(labels[-n_hold:])
    if len({lab.agreed for lab in train}) < 2:
        return None  # nothing to tell apart yet
    candidate = fit_candidate(train, prior, config)
    wrong = [not lab.agreed for lab in held]
    new = auroc(label_scores(held, candidate), wrong)
    old = auroc(label_scores(held, current), wrong)
    fitted_on = {"labels": len(train), "holdout": len(held), "auroc_holdout": new}
    fitted = replace(candidate, name="learned", fitted_on=fitted_on)
    return Refit(fitted, new, old, len(train), len(held))


FOLDS = 5


def held_out_scores(
    labels: Sequence[Label], scorer: Scorer, prior: Scorer, config: LearningConfig
) -> list[float]:
    """Each label's P(wrong) from a scorer that did not see it: ``scorer``'s own when it
    is the ``prior`` (fitted on none of them), else a refit's on the other ``FOLDS``
    folds (a seeded shuffle, so the same labels give the same scores)."""
    if scorer == prior or len(labels) < FOLDS:
        return label_scores(labels, scorer)
    order = list(range(len(labels)))
    random.Random(len(labels)).shuffle(order)  # folds by chance, not by arrival
    scores = [0.0] * len(labels)
    for k in range(FOLDS):
        held = set(order[k::FOLDS])
        fold = fit_candidate([lab for i, lab in enumerate(labels) if i not in held], prior, config)
        for i in held:
            scores[i] = fold.score(labels[i].features, labels[i].ngrams)
    return scores


def fit_candidate(labels: Sequence[Label], prior: Scorer, config: LearningConfig) -> Scorer:
    """The refit's recipe: held to ``prior`` by ``prior_strength`` (0: from scratch)."""
    return fit_scorer(
        labels,
        threshold=0.5,
        fitted_on={"labels": len(labels)},
        prior=prior if config.prior_strength else None,
        l2=config.prior_strength or 1.0,
    )
