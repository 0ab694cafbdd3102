"""The judge's threshold from the quality target, held by the learner (docs/target.md).

``speculative_decoding.target_agreement`` is the share of locally served answers that
must agree with the cloud. With learning on, every look at new labels ends here: the
labels the store holds are scored out of sample for the scorer in force (its own scores
when it is the configured one, else out-of-fold refits: ``app.learning.refit``
``held_out_scores``), and the live spill threshold becomes
``app.routing.target.threshold_for`` of them: the loosest of fixed sequences of P(wrong)
thresholds at which the labels it would serve agree at least ``target`` of the time with
about 95% confidence (a one-sided Wilson bound). When no threshold holds (too few labels,
or too many wrong ones) the judge accepts nothing: every draft is verified (but in the
gate's local lane, held by its own bound: ``app.routing.gate.judged_in``), which is how
it starts (cautious when cold). An explicit ``spill_threshold`` in the
config wins over all this: the bound is still worked out and shown, but the user's
threshold decides.

**Which labels count: all of them, with their weights.** Every draft the judge doubts is
verified and labelled (weight 1); the accepted ones are labelled only by audits, at
``audit_rate``, weighing ``1 / audit_rate`` (inverse propensity). Together they stand for
every judged draft as it came, so the agreement of the labels under a threshold is an
unbiased estimate of what that threshold would serve, beyond the one that was in force
when they were taken (audits alone would only describe what was already served, and
cold, when nothing is served, there are none). An audit's weight counts as that many
trials only through the effective sample size (``threshold_for``): ten audits at 0.1 are
not a hundred labels. Drafts never judged (cut at the budget, stopped early, cancelled
for the cloud) give no label; they are never served locally either.

A learned scorer is fitted on these labels; scored by it, they would look more separable
than the next drafts are (on the bench's traces, by far: see ``app.learning.folds``), so
they are scored out of fold. The audits' own figure (``served``: the audited agreement
of what was actually served, with its bound) is the check that needs no model.

Pure apart from ``TargetHold``'s state: the learner reads the store and calls ``refresh``
in its worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from app.learning.labels import Label
from app.routing.scorer import Scorer
from app.routing.target import Bound, lower_bound, threshold_for

log = logging.getLogger("specproxy.learning")
CONFIDENCE = 0.95
# A threshold no P(wrong) is at or under: the judge accepts nothing, every draft is verified
# (outside the gate's local lane).
VERIFY_ALL = -1.0


def label_scores(labels: Sequence[Label], scorer: Scorer) -> list[float]:
    """Each label's P(wrong) under ``scorer`` (a feature the label lacks counts as 0)."""
    out = []
    for lab in labels:
        features = lab.features
        if not all(f in features for f in scorer.features):
            features = {f: features.get(f, 0.0) for f in scorer.features}
        out.append(scorer.score(features, lab.ngrams))
    return out


def bound_of(labels: Sequence[Label], scores: Sequence[float], target: float) -> Bound:
    """The threshold that holds ``target`` on ``labels`` with these ``scores`` (weighted)."""
    return threshold_for(
        scores,
        [lab.agreed for lab in labels],
        target,
        weights=[lab.weight for lab in labels],
        confidence=CONFIDENCE,
    )


class TargetHold:
    """The target's bound as last worked out, and the threshold the judge uses because of it.

    ``explicit``: the configured ``spill_threshold`` (None: the target decides).
    ``every``: new labels between two looks (the learner's ``refit_every``).
    """

    def __init__(self, target: float, explicit: float | None = None, every: int = 25) -> None:
        self.target = target
        self.explicit = explicit
        self.every = every
        self.bound = threshold_for([], [], target, confidence=CONFIDENCE)
        self.unseen = 0  # labels added since the last refresh

    def seen(self, added: int) -> None:
        self.unseen += added

    @property
    def due(self) -> bool:
        return self.unseen >= self.every

    def refresh(self, labels: Sequence[Label], scores: Sequence[float]) -> Bound:
        """Work the bound out again on ``labels`` scored out of sample (``held_out_scores``;
        logged when the threshold changes)."""
        before = self.bound.threshold
        self.unseen = 0
        self.bound = bound = bound_of(labels, scores, self.target)
        if bound.threshold != before:
            log.info(
                "learning: target agreement %s holds at threshold %s (estimate %s, bound %s "
                "on %d of %d labels)%s",
                self.target,
                bound.threshold,
                bound.estimate,
                bound.lower,
                bound.served,
                bound.n,
                "" if self.explicit is None else f"; spill_threshold {self.explicit} decides",
            )
        return bound

    @property
    def threshold(self) -> float:
        """What the judge compares P(wrong) with: the explicit one, else the target's, else
        ``VERIFY_ALL``."""
        if self.explicit is not None:
            return self.explicit
        return self.bound.threshold if self.bound.threshold is not None else VERIFY_ALL

    @property
    def verifies_all(self) -> bool:
        """No threshold is in force: the judge accepts nothing (outside the local lane)."""
        return self.threshold == VERIFY_ALL

    def status(self) -> dict[str, Any]:
        """``/stats`` → ``learning.target``: the bound, and the threshold in force with why."""
        in_force = self.threshold
        return {
            **self.bound.as_mapping(),
            "in_force": None if in_force < 0 else round(in_force, 4),
            "source": "spill_threshold" if self.explicit is not None else "target",
        }


def served_agreement(
    audits: int, agreed: int, target: float, confidence: float = CONFIDENCE
) -> dict[str, Any]:
    """The audited agreement of the locally served answers and its one-sided lower bound;
    ``holds``: the bound is at or above the target (None before the first audit)."""
    if audits <= 0:
        return {"audits": 0, "agreed": 0, "agreement": None, "lower_bound": None, "holds": None}
    low = lower_bound(agreed, audits, confidence)
    return {
        "audits": audits,
        "agreed": agreed,
        "agreement": round(agreed / audits, 4),
        "lower_bound": round(low, 4),
        "holds": low >= target,
    }


def target_block(learning: Mapping[str, Any]) -> dict[str, Any] | None:
    """``/stats`` → ``quality.target`` from ``/stats`` → ``learning`` (the workers' audits
    summed): the target's bound and the audited agreement of what was served. None with
    learning off (no labels, no target)."""
    target = learning.get("target")
    if not learning.get("enabled") or not isinstance(target, Mapping):
        return None
    audits = learning.get("audits") or {}
    served = served_agreement(
        int(audits.get("n", 0)), int(audits.get("agreed", 0)), float(target["target"])
    )
    return {**target, "served": served}
