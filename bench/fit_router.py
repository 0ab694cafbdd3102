#!/usr/bin/env python3
"""Fit the scored routing policies on the tune set and ship them as JSON scorers.

    .venv/bin/python -m bench.routing_eval --data bench/data/routing_tune.jsonl \\
        --json bench/results/routing_tune.json --plot bench/results/routing_tune.png
    .venv/bin/python -m bench.fit_router bench/results/routing_tune.json

Reads the draft records routing_eval.py saved for the tune set (never the evaluation set)
and fits, with scikit-learn, one L2 logistic regression per policy on standardised
features; the regularisation strength is chosen by 5-fold cross-validated AUROC:

* ``confidence``: the logprob features only (app.routing.features.LOGPROB_FEATURES);
* ``combined``: every feature (logprobs, length, hedging words, context type).

Drafts cut at the budget are left out of the fit: the proxy sends them to the cloud
whatever their score. Each scorer is written to app/routing/scorers/<name>.json with its
default threshold (0.5: cloud when a wrong draft is more likely than not), the share of
each context type it sent to the cloud on the tune set (the hedging prior) and where it
was fitted. scikit-learn is needed here only; the proxy reads the JSON with the standard
library.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.routing.features import FEATURES, LOGPROB_FEATURES
from app.routing.scorer import SHIPPED, Scorer
from bench.routing_eval_report import CUT, DraftRecord

ROOT = Path(__file__).resolve().parent.parent

POLICY_FEATURES: dict[str, tuple[str, ...]] = {
    "confidence": LOGPROB_FEATURES,
    "combined": FEATURES,
}
DEFAULT_THRESHOLD = 0.5


def fit(name: str, records: Sequence[DraftRecord], provenance: dict[str, Any]) -> Scorer:
    """One logistic-regression scorer on the records' features; label = draft is wrong."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    features = POLICY_FEATURES[name]
    usable = [r for r in records if not r.truncated]
    x = np.array([[r.features[f] for f in features] for r in usable], dtype=float)
    y = np.array([0 if r.correct else 1 for r in usable])
    if len(set(y)) < 2:
        raise ValueError("the tune records need both right and wrong uncut drafts")
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0  # a constant feature: weight 0 whatever its scale
    x = (x - mean) / scale
    folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)

    def cv_auroc(c: float) -> float:
        model = LogisticRegression(C=c, max_iter=5000)
        return float(cross_val_score(model, x, y, cv=folds, scoring="roc_auc").mean())

    best_c = max(np.logspace(-3, 2, 16).tolist(), key=cv_auroc)
    model = LogisticRegression(C=best_c, max_iter=5000).fit(x, y)
    scorer = Scorer(
        name=name,
        features=features,
        mean=tuple(float(v) for v in mean),
        scale=tuple(float(v) for v in scale),
        weights=tuple(float(v) for v in model.coef_[0]),
        bias=float(model.intercept_[0]),
        threshold=DEFAULT_THRESHOLD,
        fitted_on={
            **provenance,
            "fit_items": len(usable),
            "C": best_c,
            "cv_auroc": cv_auroc(best_c),
        },
    )
    return replace(scorer, spill_prior=spill_prior(scorer, records))


def spill_prior(scorer: Scorer, records: Sequence[DraftRecord]) -> dict[str, float]:
    """Per context type, the share of drafts the scorer sends to the cloud at its threshold."""
    sent: dict[str, list[bool]] = {}
    for r in records:
        score = CUT if r.truncated else scorer.score(r.features)
        sent.setdefault(r.context_type, []).append(score > scorer.threshold)
    return {ctx: round(sum(flags) / len(flags), 4) for ctx, flags in sorted(sent.items())}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("records", type=Path, help="routing_eval.py --json output on tune data")
    parser.add_argument("--out", type=Path, default=SHIPPED, help="directory for the JSON files")
    args = parser.parse_args(argv)
    document = json.loads(args.records.read_text(encoding="utf-8"))
    if "routing_eval" in Path(document["setup"]["data"]).name:
        print("error: fit on the tune set, never on the evaluation set", file=sys.stderr)
        return 2
    records = [DraftRecord.from_mapping(raw) for raw in document["records"]]
    provenance = {
        "data": Path(document["setup"]["data"]).name,
        "items": len(records),
        "max_draft_tokens": document["setup"]["max_draft_tokens"],
        "model": document["machine"]["model"],
        "specproxy_commit": document["machine"]["specproxy_commit"],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    for name in POLICY_FEATURES:
        scorer = fit(name, records, provenance)
        path = args.out / f"{name}.json"
        path.write_text(json.dumps(scorer.as_mapping(), indent=1) + "\n", encoding="utf-8")
        weights = ", ".join(
            f"{f} {w:+.2f}" for f, w in zip(scorer.features, scorer.weights, strict=True)
        )
        fitted = scorer.fitted_on
        print(
            f"{name}: C={fitted['C']:.3g} (5-fold AUROC {fitted['cv_auroc']:.3f}); "
            f"standardised weights: {weights}"
        )
        print(f"  cloud share by context type at {scorer.threshold}: {scorer.spill_prior}")
        print(f"  wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
