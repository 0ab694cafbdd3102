"""The guarded refit on its own (``app.learning.refit``): what it fits on, what it holds
back, and when its candidate may replace the current scorer."""

from __future__ import annotations

from app.composition import build_policy
from app.config import LearningConfig, SpeculativeConfig
from app.learning.labels import Label
from app.learning.refit import Refit, refit
from app.routing.features import FEATURES

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
