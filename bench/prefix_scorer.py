#!/usr/bin/env python3
"""Can a scorer fitted on draft prefixes judge a draft so far better than the shipped one?

    .venv/bin/python -m bench.prefix_scorer

The first-token trust and early abort read the shipped scorer (fitted on whole drafts) on
the first tokens of a draft. This bench asks whether a scorer fitted on prefixes would
read them better. It drafts every item of the tune, evaluation and transfer sets on the
real llama-server (temperature 0, the config's draft budget; ``bench.routing_eval``'s
drafts) and cuts each draft at ``--cuts`` tokens (a draft that ended by then has no
prefix there). Two labels per prefix:

* ``wrong``: the whole draft fails its item's judge or is cut at the budget (it should
  go to the cloud);
* ``rejected``: the proxy's judge (the configured policy) rejects the whole draft (what
  the proxy will do with it; the trust's wait is wasted on these).

For each label it reports the AUROC of the shipped scorer read on the prefixes, and of an
L2 logistic regression on the same features fitted on the tune set's prefixes (5-fold
cross-validation grouped by item on the tune set; fitted on all of them for the other
sets), overall and per cut. Fitting needs scikit-learn (the ``dev`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.composition import build_policy
from app.config import load_settings
from app.evaluation.judges import load_items
from app.evaluation.metrics import auroc
from app.routing.classify import classify
from app.routing.features import FEATURES
from app.routing.policy import Policy, decide
from app.routing.scorer import Scorer
from app.routing.signals import DraftSignals
from bench.host import host_facts
from bench.routing_eval import draft_items

ROOT = Path(__file__).resolve().parent.parent
SETS = {
    "tune": ROOT / "bench/data/routing_tune.jsonl",
    "evaluation": ROOT / "bench/data/routing_eval.jsonl",
    "transfer": ROOT / "bench/data/transfer.jsonl",
}
LABELS = ("wrong", "rejected")


@dataclass(frozen=True)
class Prefix:
    item: str
    cut: int
    features: dict[str, float]
    wrong: bool
    rejected: bool


def prefix(signals: DraftSignals, cut: int) -> DraftSignals:
    """The draft as it stood after ``cut`` tokens, still running."""
    tokens = signals.tokens[:cut]
    text = "".join(t.text for t in tokens)
    return DraftSignals(text, len(tokens), signals.budget, None, tokens)


def prefixes(
    item: str,
    signals: DraftSignals,
    correct: bool,
    context: str,
    policy: Policy,
    cuts: Sequence[int],
) -> list[Prefix]:
    """One row per cut the draft ran past, labelled by the whole draft."""
    wrong = signals.truncated or not correct
    rejected = not decide(signals, policy, context).accept
    return [
        Prefix(item, cut, policy.score(prefix(signals, cut), context)[1], wrong, rejected)
        for cut in cuts
        if len(signals.tokens) > cut
    ]


def matrix(rows: Sequence[Prefix]) -> np.ndarray:
    return np.array([[r.features[f] for f in FEATURES] for r in rows], dtype=float)


def fitted(rows: Sequence[Prefix], label: str, c: float) -> tuple[np.ndarray, Any]:
    """Grouped 5-fold cross-validated scores on ``rows`` and a model fitted on all."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = matrix(rows), np.array([getattr(r, label) for r in rows])
    groups = [r.item for r in rows]

    def model() -> Any:
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=5000))

    cv = np.zeros(len(rows))
    for train, test in GroupKFold(n_splits=5).split(x, y, groups):
        cv[test] = model().fit(x[train], y[train]).predict_proba(x[test])[:, 1]
    return cv, model().fit(x, y)


def table(
    sets: dict[str, list[Prefix]], shipped: Scorer, cuts: Sequence[int], c: float
) -> list[str]:
    """AUROC of the shipped and the prefix-fitted scorer, per label, set and cut."""
    lines = [
        "| label | set | cut | prefixes | share positive | shipped scorer | prefix-fitted |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for label in LABELS:
        cv, model = fitted(sets["tune"], label, c)
        for name, rows in sets.items():
            fit = cv if name == "tune" else model.predict_proba(matrix(rows))[:, 1]
            ship = [shipped.score(r.features) for r in rows]
            for cut in (None, *cuts):
                at = [i for i, r in enumerate(rows) if cut is None or r.cut == cut]
                truth = [getattr(rows[i], label) for i in at]
                of_shipped = auroc([ship[i] for i in at], truth)
                of_fitted = auroc([float(fit[i]) for i in at], truth)
                lines.append(
                    f"| {label} | {name}{' (CV)' if name == 'tune' else ''} "
                    f"| {cut or 'all'} | {len(at)} | {100 * np.mean(truth):.0f}% "
                    f"| {_num(of_shipped)} | {_num(of_fitted)} |"
                )
    return lines


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    parser.add_argument("--cuts", type=int, nargs="+", default=[8, 12, 16, 20, 24])
    parser.add_argument("--c", type=float, default=1.0, help="inverse L2 strength of the fit")
    args = parser.parse_args(argv)
    settings = load_settings(args.config, env={})
    spec = settings.speculative_decoding
    local = settings.models[spec.draft_model]
    policy = build_policy(spec)
    if policy.scorer is None:
        print("error: the config's policy has no scorer (seed rules)", file=sys.stderr)
        return 2
    shipped = policy.scorer
    sets: dict[str, list[Prefix]] = {}
    for name, path in SETS.items():
        items = load_items(path.read_text(encoding="utf-8").splitlines())
        drafts, _ = asyncio.run(draft_items(items, local, spec, spec.max_draft_tokens))
        sets[name] = [
            row
            for item, signals in zip(items, drafts, strict=True)
            for row in prefixes(
                item.id,
                signals,
                item.passes(signals.text),
                str(classify(item.prompt)),
                policy,
                args.cuts,
            )
        ]
    command = shlex.join([".venv/bin/python", "-m", "bench.prefix_scorer", *sys.argv[1:]])
    print(f"$ {command}")
    host = host_facts()
    print(
        f"machine: {host['cpu']}, {host['cores']} cores, Python {host['python']}, "
        f"specproxy {host['specproxy_commit']}; shipped scorer {shipped.name} (in-sample on "
        f"the tune set: it was fitted on its whole drafts), fit C={args.c}"
    )
    print()
    print("\n".join(table(sets, shipped, args.cuts, args.c)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
