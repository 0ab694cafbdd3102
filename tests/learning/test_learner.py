"""The learner's parts: the fit reads the question, the store keeps labels, a refit
happens off the event loop, and a worse candidate never replaces the scorer."""

from __future__ import annotations

import asyncio
import fcntl
import math
import random
from pathlib import Path

import pytest

from app.composition import build_policy
from app.config import LearningConfig, SpeculativeConfig
from app.evaluation.metrics import auroc
from app.learning.fit import fit_scorer
from app.learning.labels import Label
from app.learning.learner import Learner
from app.learning.store import LearningStore
from app.routing.features import FEATURES
from app.routing.request_features import SHAPE_FEATURES, request_features
from tests.learning.traffic import questions

FLAT = dict.fromkeys(FEATURES, 0.5)  # every draft reads the same: only the question differs


def labels_for(triples: list[tuple[str, str, str]]) -> list[Label]:
    out = []
    for prompt, _, _ in triples:
        request = request_features({"messages": [{"role": "user", "content": prompt}]})
        agreed = prompt.startswith("What is the capital")
        out.append(Label({**FLAT, **request.shape}, request.ngrams, "prose", agreed))
    return out


def test_the_fit_learns_the_kind_of_question_from_its_ngrams() -> None:
    scorer = fit_scorer(labels_for(questions(40)))
    unseen = labels_for(questions(16, offset=40))
    scores = [scorer.score(lab.features, lab.ngrams) for lab in unseen]
    assert auroc(scores, [not lab.agreed for lab in unseen]) == 1.0
    assert scorer.spill_prior == {"prose": 0.5}


def test_a_fit_from_the_prior_stays_near_it_with_few_labels_and_leaves_it_with_many() -> None:
    prior = build_policy(SpeculativeConfig(policy="combined")).scorer
    assert prior is not None
    rng = random.Random(5)
    drafts = [
        {
            f: rng.gauss(m, s)
            for f, m, s in zip(prior.features, prior.mean, prior.scale, strict=True)
        }
        for _ in range(60)
    ]
    # labels that contradict the prior: it doubts a draft, the label says it agreed
    labels = [
        Label({**d, **dict.fromkeys(SHAPE_FEATURES, 0.0)}, (), "prose", prior.score(d) > 0.5)
        for d in drafts
    ]
    prior_scores = [prior.score(d) for d in drafts]
    # held firmly: the weights stay the prior's (the base rate, unpenalised, may move)
    held = fit_scorer(labels[:8], prior=prior, l2=1e6)
    shift = [
        _logit(held.score(lab.features)) - _logit(p)
        for lab, p in zip(labels, prior_scores, strict=True)
    ]
    assert shift == pytest.approx([shift[0]] * len(shift), abs=0.05)
    moved = fit_scorer(labels, prior=prior, l2=1.0)
    wrong = [not lab.agreed for lab in labels]
    moved_scores = [moved.score(lab.features) for lab in labels]
    assert auroc(prior_scores, wrong) < 0.5 < auroc(moved_scores, wrong)


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def test_the_store_keeps_the_newest_labels_across_reopening(tmp_path: Path) -> None:
    store = LearningStore(tmp_path, max_labels=100)
    batch = labels_for(questions(150))
    for i in range(0, 150, 10):
        store.append(batch[i : i + 10])
    again = LearningStore(tmp_path, max_labels=100)
    kept = again.read()
    assert len(kept) == again.count() == 100
    assert kept == batch[-100:]


def test_a_refit_runs_off_the_event_loop(tmp_path: Path) -> None:
    """While a refit waits on the store (its lock held here), the loop keeps running."""
    config = LearningConfig(enabled=True, state_dir=str(tmp_path), min_labels=10, refit_every=10)
    policy = build_policy(SpeculativeConfig(policy="combined"))
    LearningStore(tmp_path, 5000).append(labels_for(questions(30)))

    async def scenario() -> int:
        learner = Learner(config, policy)
        await learner.start()
        with (tmp_path / "labels.jsonl").open("rb") as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # the refit's read blocks on this
            learner._unfitted = 30
            for _ in range(50):  # a refit starts within a tick; the loop must stay free
                await asyncio.sleep(0.05)
                if learner._refit is not None:
                    break
            assert learner._refit is not None and not learner._refit.done()
            ticks = 0
            for _ in range(5):  # the loop runs while the refit is blocked
                await asyncio.sleep(0)
                ticks += 1
            fcntl.flock(held, fcntl.LOCK_UN)
        await asyncio.wait_for(learner._refit, 10)
        await learner.close()
        assert learner.version == 1
        return ticks

    assert asyncio.run(scenario()) == 5


def test_a_candidate_worse_on_the_holdout_does_not_replace_the_scorer(tmp_path: Path) -> None:
    config = LearningConfig(enabled=True, state_dir=str(tmp_path), min_labels=10, refit_every=10)
    policy = build_policy(SpeculativeConfig(policy="combined"))
    store = LearningStore(tmp_path, 5000)
    good = labels_for(questions(40))
    store.append(good)
    learner = Learner(config, policy)
    learner._load()
    learner._refit_now()
    assert learner.version == 1
    # the newest labels now contradict the old ones: the candidate cannot be as good on them
    flipped = [
        Label(lab.features, lab.ngrams, lab.context_type, not lab.agreed)
        for lab in labels_for(questions(10, offset=40))
    ]
    store.append(good[:30] + flipped)
    learner._refit_now()
    assert learner.version == 1  # kept
    assert learner.refits == 2
