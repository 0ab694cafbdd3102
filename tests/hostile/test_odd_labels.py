"""D22: a stored label with NaN or infinite features, or a weight past any audit's
(``1e308``), is skipped when the labels are read back from ``labels.jsonl`` (a real file),
so every later refit fits on the others and gives a usable scorer."""

from __future__ import annotations

import json
import math
from pathlib import Path

from app.learning.fit import fit_scorer
from app.learning.store import LearningStore
from tests.support.gate_labels import store_labels, two_kinds


def test_odd_labels_are_skipped_and_the_refit_works(tmp_path: Path) -> None:
    state = tmp_path / "state"
    good = two_kinds(20)
    store_labels(state, good)
    sample = good[0].as_mapping()
    odd = [
        {**sample, "features": dict.fromkeys(sample["features"], math.nan)},
        {**sample, "features": dict.fromkeys(sample["features"], math.inf)},
        {**sample, "weight": 1e308},
        {**sample, "weight": -1.0},
        {**sample, "ts": math.inf},
    ]
    with (state / "labels.jsonl").open("a") as file:  # json writes NaN and Infinity as such
        file.writelines(json.dumps(label) + "\n" for label in odd)
    labels = LearningStore(state, max_labels=1000).read()
    assert len(labels) == len(good)
    scorer = fit_scorer(labels)
    numbers = [*scorer.weights, *scorer.mean, *scorer.scale, scorer.bias]
    assert all(math.isfinite(x) for x in numbers)
