"""Scorer files for tests: one constant P(wrong) for every draft."""

from __future__ import annotations

import json
from pathlib import Path

from app.routing.scorer import Scorer


def write_scorer(tmp_path: Path, *, bias: float = 5.0) -> Path:
    """A scorer whose P(wrong) is sigmoid(``bias``) for every draft (5: spills every one;
    -5: trusts every one); math spilled always when fitted, prose never."""
    scorer = Scorer(
        name="constant",
        features=("mean_logp",),
        mean=(0.0,),
        scale=(1.0,),
        weights=(0.0,),
        bias=bias,
        spill_prior={"math": 1.0, "prose": 0.0},
    )
    path = tmp_path / "scorer.json"
    path.write_text(json.dumps(scorer.as_mapping()))
    return path
