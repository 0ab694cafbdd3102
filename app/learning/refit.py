"""The guarded refit: a candidate scorer fitted on all but the newest labels, and whether
it may replace the current one (its AUROC on the labels held back is not lower); and the
labels' scores the target's threshold is chosen on, from scorers that never saw them.

A learned scorer scores the labels it was fitted on better than it will score the next
drafts: on the bench's eval traces its in-sample scores made 0.7 and 0.8 hold on 59-118
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
    if not _two_classes(train):
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
    is the ``prior`` (fitted on none of them), else a refit's on the other folds (up to
    ``FOLDS``, by question: ``_folds``). A fold whose other labels are all of one class
    (nothing to fit) is scored by the prior, as ``refit`` would fit nothing."""
    if scorer == prior:
        return label_scores(labels, scorer)
    scores = [0.0] * len(labels)
    for held in _folds(labels):
        train = [lab for i, lab in enumerate(labels) if i not in held]
        fold = fit_candidate(train, prior, config) if _two_classes(train) else prior
        indices = sorted(held)
        for i, score in zip(indices, label_scores([labels[i] for i in indices], fold), strict=True):
            scores[i] = score
    return scores


def _folds(labels: Sequence[Label]) -> list[set[int]]:
    """The labels' indices in up to ``FOLDS`` folds, a question's labels (the same
    n-grams) together, so a repeated question is never scored by a fit that saw it; the
    questions shuffled by a seeded generator (the same labels, the same folds)."""
    groups: dict[object, set[int]] = {}
    for i, lab in enumerate(labels):
        groups.setdefault(lab.ngrams or i, set()).add(i)  # no n-grams: a question alone
    keys = list(groups)
    random.Random(len(labels)).shuffle(keys)
    folds: list[set[int]] = [set() for _ in range(min(FOLDS, len(keys)))]
    for k, key in enumerate(keys):
        folds[k % len(folds)] |= groups[key]
    return folds


def _two_classes(labels: Sequence[Label]) -> bool:
    return len({lab.agreed for lab in labels}) == 2


def fit_candidate(labels: Sequence[Label], prior: Scorer, config: LearningConfig) -> Scorer:
    """The refit's recipe: held to ``prior`` by ``prior_strength`` (0: from scratch)."""
    return fit_scorer(
        labels,
        threshold=0.5,
        fitted_on={"labels": len(labels)},
        prior=prior if config.prior_strength else None,
        l2=config.prior_strength or 1.0,
    )
