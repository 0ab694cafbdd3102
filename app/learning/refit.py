"""The guarded refit: a candidate scorer fitted on all but the newest labels, and whether
it may replace the current one (its AUROC on the labels held back is not lower).

Pure: the learner reads the store, calls ``refit`` in its worker thread, and writes the
candidate when it is ``better``.
"""

from __future__ import annotations

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
    candidate = fit_scorer(
        train,
        threshold=0.5,
        fitted_on={"labels": len(train)},
        prior=prior if config.prior_strength else None,
        l2=config.prior_strength or 1.0,
    )
    wrong = [not lab.agreed for lab in held]
    new = auroc(label_scores(held, candidate), wrong)
    old = auroc(label_scores(held, current), wrong)
    fitted_on = {"labels": len(train), "holdout": len(held), "auroc_holdout": new}
    fitted = replace(candidate, name="learned", fitted_on=fitted_on)
    return Refit(fitted, new, old, len(train), len(held))
