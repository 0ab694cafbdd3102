"""Cross-fitting: every label scored by a fit that never saw its question. Pure.

A scorer that reads the request's n-grams scores the labels it was fitted on far better
than it will score the next requests: on the bench's eval traces in-sample scores held
thresholds that the audits did not back (docs/target.md). And a question asked again is
the same label again, so folds drawn by label leak too: a repeat is scored by a fit that
saw its copy, and coin tosses asked twice look learnable (``tests/learning/test_refit.py``,
``tests/learning/test_gate_fit.py``).

So the thresholds of the judge (``app.learning.refit``) and of the gate's lanes
(``app.learning.gate_fit``) are chosen on out-of-fold scores: the labels are cut into up
to ``FOLDS`` folds by question (the same n-grams in one fold) and each fold is scored by a
fit on the others.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from app.learning.labels import Label
from app.learning.threshold import label_scores
from app.routing.scorer import Scorer

FOLDS = 5


def question_folds(labels: Sequence[Label], folds: int = FOLDS) -> list[set[int]]:
    """The labels' indices in up to ``folds`` folds, a question's labels (the same
    n-grams) together; the questions shuffled by a seeded generator, so the same labels
    give the same folds."""
    groups: dict[object, set[int]] = {}
    for i, lab in enumerate(labels):
        # the buckets as a set (they come in no set order); none: a question alone
        groups.setdefault(frozenset(lab.ngrams) or i, set()).add(i)
    keys = list(groups)
    random.Random(len(labels)).shuffle(keys)
    cut: list[set[int]] = [set() for _ in range(min(folds, len(keys)))]
    for k, key in enumerate(keys):
        cut[k % len(cut)] |= groups[key]
    return cut


def cross_fit(
    labels: Sequence[Label],
    fit: Callable[[list[Label]], Scorer],
    folds: Sequence[set[int]] | None = None,
) -> list[float]:
    """Each label's P(wrong) by the scorer ``fit`` gives on the other folds
    (``question_folds`` unless given; ``fit`` is given no labels when there is one
    question, and one class when the others agree)."""
    scores = [0.0] * len(labels)
    for held in question_folds(labels) if folds is None else folds:
        scorer = fit([lab for i, lab in enumerate(labels) if i not in held])
        indices = sorted(held)
        held_scores = label_scores([labels[i] for i in indices], scorer)
        for i, value in zip(indices, held_scores, strict=True):
            scores[i] = value
    return scores
