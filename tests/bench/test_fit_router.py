"""bench/fit_router.py: fitted scorers separate what the features separate, and load back."""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path

import pytest

from app.evaluation.metrics import auroc
from app.routing.features import FEATURES, LOGPROB_FEATURES
from app.routing.scorer import load_scorer
from bench.fit_router import fit, main
from bench.routing_eval_report import DraftRecord


def record(i: int, wrong: bool, rng: random.Random, *, truncated: bool = False) -> DraftRecord:
    """A draft whose mean logprob says whether it is wrong (with noise); the rest is noise."""
    features = {name: rng.gauss(0, 1) for name in FEATURES}
    features["mean_logp"] = (-2.0 if wrong else -0.5) + rng.gauss(0, 0.3)
    return DraftRecord(
        id=f"fact-tune-{i}",
        kind="fact",
        context_type="math" if i % 2 else "prose",
        draft="x",
        correct=not wrong and not truncated,
        judged_correct=not wrong,
        n_tokens=5,
        finish_reason="length" if truncated else "stop",
        truncated=truncated,
        mean_p=None,
        min_p=None,
        mean_entropy=None,
        max_entropy=None,
        mean_margin=None,
        chars=1,
        hedging=False,
        seed_accept=True,
        seed_reasons=(),
        features=features,
    )


def records(n: int = 80) -> list[DraftRecord]:
    rng = random.Random(7)
    return [record(i, i % 3 == 0, rng) for i in range(n)] + [record(n, False, rng, truncated=True)]


@pytest.mark.slow
def test_fitted_scorer_ranks_by_the_informative_feature() -> None:
    data = records()
    for name in ("confidence", "combined"):
        scorer = fit(name, data, {"data": "routing_tune.jsonl"})
        assert scorer.features == (LOGPROB_FEATURES if name == "confidence" else FEATURES)
        weight = dict(zip(scorer.features, scorer.weights, strict=True))["mean_logp"]
        assert weight < 0  # a more probable draft is less likely wrong
        uncut = [r for r in data if not r.truncated]
        scores = [scorer.score(r.features) for r in uncut]
        assert auroc(scores, [not r.correct for r in uncut]) > 0.95
        assert scorer.fitted_on["fit_items"] == len(uncut)  # the cut draft is left out
        assert set(scorer.spill_prior) == {"math", "prose"}


@pytest.mark.slow
def test_main_writes_loadable_scorers_and_refuses_the_evaluation_set(tmp_path: Path) -> None:
    document = {
        "setup": {"data": "bench/data/routing_tune.jsonl", "max_draft_tokens": 128},
        "machine": {"model": "m.gguf", "specproxy_commit": "abc"},
        "records": [asdict(r) for r in records()],
    }
    tune = tmp_path / "tune.json"
    tune.write_text(json.dumps(document), encoding="utf-8")
    assert main([str(tune), "--out", str(tmp_path)]) == 0
    for name in ("confidence", "combined"):
        scorer = load_scorer(tmp_path / f"{name}.json")
        assert scorer.name == name and scorer.threshold == 0.5
        assert scorer.fitted_on["max_draft_tokens"] == 128

    document["setup"]["data"] = "bench/data/routing_eval.jsonl"
    tune.write_text(json.dumps(document), encoding="utf-8")
    assert main([str(tune), "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()
