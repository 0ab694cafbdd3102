"""The guarded refit: a candidate scorer fitted on all but the newest labels, and whether
it may replace the current one (its AUROC on the labels held back is not lower); and the
labels' scores the target's threshold is chosen on, from scorers that never saw them.

The threshold for the target is chosen on labels scored out of sample: ``held_out_scores``
scores each label by a scorer fitted the same way on the other folds
(``app.learning.folds`` says why).

Pure: the learner reads the store, calls these in its worker thread, and writes the
candidate when it is ``better``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from app.config import LearningConfig
from app.evaluation.metrics import auroc
from app.learning.fit import fit_scorer
from app.learning.folds import cross_fit
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

    def report(self, refit_no: int, version: int, labels: int, took_s: float) -> str:
        """What the learner logs of this refit (``version``: the scorer in force)."""
        aurocs = f"holdout AUROC {_fmt(self.new)} against {_fmt(self.old)}"
        if not self.better:
            kept = f"refit {refit_no} kept scorer v{version}"
            return f"{kept}: {aurocs} ({labels} labels, {took_s:.2f} s)"
        return (
            f"scorer v{version + 1} replaces v{version}: {aurocs} (trained on {self.train} "
            f"labels, held back {self.held}, {took_s:.2f} s)"
        )


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


def held_out_scores(
    labels: Sequence[Label], scorer: Scorer, prior: Scorer, config: LearningConfig
) -> list[float]:
    """Each label's P(wrong) from a scorer that did not see it: ``scorer``'s own when it
    is the ``prior`` (fitted on none of them), else a refit's on the other folds, by
    question (``app.learning.folds``). A fold whose other labels are all of one class
    (nothing to fit) is scored by the prior, as ``refit`` would fit nothing."""
    if scorer == prior:
        return label_scores(labels, scorer)

    def fit(train: list[Label]) -> Scorer:
        return fit_candidate(train, prior, config) if _two_classes(train) else prior

    return cross_fit(labels, fit)


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


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
