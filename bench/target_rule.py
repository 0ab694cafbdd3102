"""The quality target's rule on simulated label sets: does a lower target ever serve less,
how often does the served share fall under its target, and how much does each target serve.

    .venv/bin/python -m bench.target_rule [--sets 1500] [--seed 7]

Each set: 60 to 2,000 drafts with a uniform P(wrong) score; each agrees with the cloud with a
probability falling with its score (a base agreement from 0.2 to 0.95, the score's pull
from none to strong). ``app.routing.target.threshold_for`` at targets 0.5 to 0.95:
- **lower serves less**: sets where some lower target served fewer drafts than a higher one;
- **under target**: sets where the drafts served agree, in truth (the simulation's own
  probabilities), less often than the target: what the 95% bound is there to make rare;
- **served**: the mean number of drafts served;
- **null**: of 400 sets of 150 drafts agreeing 78% of the time whatever their score, how
  many hold 0.8 at all (at most about 5% should).
Pure computation, no servers; seconds.
"""

from __future__ import annotations

import argparse
import itertools
import math
import random

from app.routing.target import threshold_for

TARGETS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def label_set(rng: random.Random) -> tuple[list[float], list[bool], list[float]]:
    """Scores, what the drafts did, and each draft's true chance of agreeing."""
    n = rng.choice([60, 100, 150, 200, 300, 500, 1000, 2000])
    base, pull = rng.uniform(0.2, 0.95), rng.uniform(0.0, 3.0)
    scores = [rng.random() for _ in range(n)]
    logit = math.log(base / (1 - base))
    chances = [1 / (1 + math.exp(-(logit + 4 * pull * (0.5 - s)))) for s in scores]
    return scores, [rng.random() < p for p in chances], chances


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    less = 0
    under = dict.fromkeys(TARGETS, 0)
    served = dict.fromkeys(TARGETS, 0)
    for _ in range(args.sets):
        scores, agreed, chances = label_set(rng)
        order = sorted(range(len(scores)), key=lambda i: scores[i])
        counts = [threshold_for(scores, agreed, t).served for t in TARGETS]
        less += any(a < b for a, b in itertools.pairwise(counts))
        for target, m in zip(TARGETS, counts, strict=True):
            served[target] += m
            under[target] += bool(m) and sum(chances[i] for i in order[:m]) / m < target
    null_rng, held = random.Random(args.seed), 0
    for _ in range(400):
        scores = [null_rng.random() for _ in range(150)]
        agreed = [null_rng.random() < 0.78 for _ in range(150)]
        held += threshold_for(scores, agreed, 0.8).threshold is not None
    print(f"$ .venv/bin/python -m bench.target_rule --sets {args.sets} --seed {args.seed}")
    print(f"lower serves less: {less} of {args.sets} sets")
    print("| target | " + " | ".join(f"{t:g}" for t in TARGETS) + " |")
    print("|---|" + "---:|" * len(TARGETS))
    print(
        "| under target, % of sets | "
        + " | ".join(f"{100 * under[t] / args.sets:.1f}" for t in TARGETS)
        + " |"
    )
    print(
        "| served, mean drafts | "
        + " | ".join(f"{served[t] / args.sets:.1f}" for t in TARGETS)
        + " |"
    )
    print(f"null: 0.8 held on {held} of 400 sets agreeing 78%")


if __name__ == "__main__":
    main()
