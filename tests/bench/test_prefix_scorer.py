"""bench/prefix_scorer.py: prefixes are the draft so far, labelled by the whole draft, and
the fitted column reads what the features say."""

from __future__ import annotations

import random

from app.routing.policy import Policy
from app.routing.scorer import load_scorer
from app.routing.signals import DraftSignals, TokenSignal
from bench.prefix_scorer import Prefix, prefix, prefixes, table


def draft(n: int, p: float, finish: str = "stop") -> DraftSignals:
    tokens = tuple(TokenSignal(f" w{i}", p, 0.1, i, ((i, p),)) for i in range(n))
    return DraftSignals("".join(t.text for t in tokens), n, 128, finish, tokens)


def test_a_prefix_is_the_draft_so_far_still_running() -> None:
    cut = prefix(draft(10, 0.9), 4)
    assert (cut.text, cut.n_tokens, cut.finish_reason) == (" w0 w1 w2 w3", 4, None)
    assert len(cut.tokens) == 4


def test_prefixes_are_cut_where_the_draft_ran_past_and_labelled_by_the_whole() -> None:
    policy = Policy(scorer=load_scorer("combined"))
    rows = prefixes("a", draft(10, 0.9), True, "prose", policy, [4, 8, 10, 12])
    assert [r.cut for r in rows] == [4, 8]  # a draft that ended at 10 has no prefix there
    assert all(not r.wrong for r in rows)
    assert rows[0].features["log_tokens"] < rows[1].features["log_tokens"]
    cut_at_budget = prefixes("b", draft(10, 0.9, "length"), True, "prose", policy, [4])
    assert cut_at_budget[0].wrong and cut_at_budget[0].rejected


def test_the_fitted_column_separates_what_the_features_separate() -> None:
    rng = random.Random(0)
    scorer = load_scorer("combined")

    def row(i: int, wrong: bool) -> Prefix:
        features = {f: rng.gauss(0, 1) for f in scorer.features}
        features["mean_logp"] = (-2.0 if wrong else -0.5) + rng.gauss(0, 0.3)
        return Prefix(f"item-{i // 2}", 8, features, wrong, wrong)

    rows = [row(i, i % 3 == 0) for i in range(120)]
    lines = table({"tune": rows, "evaluation": rows}, scorer, [8], 1.0)
    fitted = [float(line.split("|")[-2]) for line in lines[2:]]
    assert len(fitted) == 2 * 2 * 2  # labels x sets x (all, cut 8)
    assert min(fitted) > 0.95
