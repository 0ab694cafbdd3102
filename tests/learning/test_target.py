"""The judge's threshold from the quality target: the learner reads its store's labels and
serves only where they agree often enough, with confidence; cold, it verifies every draft."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from app.composition import build_policy
from app.config import LearningConfig, SpeculativeConfig
from app.learning.labels import Label
from app.learning.learner import Learner
from app.learning.refit import held_out_scores
from app.learning.store import LearningStore
from app.learning.threshold import VERIFY_ALL, label_scores, served_agreement, target_block
from app.routing.features import FEATURES
from app.routing.policy import SpillReason, decide
from app.routing.request_features import SHAPE_FEATURES, request_features
from app.routing.signals import DraftSignals, TokenSignal
from app.routing.target import lower_bound, threshold_for
from tests.learning.traffic import questions

POLICY = build_policy(SpeculativeConfig(policy="combined"))
PRIOR = POLICY.scorer
assert PRIOR is not None
FLAT = dict.fromkeys(FEATURES, 0.5)


def synthetic_labels(n: int, seed: int = 3, audit_rate: float = 0.25) -> list[Label]:
    """Drafts spread around the prior's means; the draft is wrong more often the more the
    prior doubts it. Drafts the prior would accept are labelled by audits (weight 1 /
    audit_rate), the doubted ones by verification (weight 1), as the proxy labels them."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        features = {
            f: rng.gauss(m, 1.5 * s)
            for f, m, s in zip(PRIOR.features, PRIOR.mean, PRIOR.scale, strict=True)
        }
        features.update(dict.fromkeys(SHAPE_FEATURES, 0.0))
        p_wrong = PRIOR.score(features)
        accepted = p_wrong <= POLICY.threshold
        if accepted and rng.random() > audit_rate:
            continue  # served and never audited: no label
        agreed = rng.random() > p_wrong**2
        weight = 1 / audit_rate if accepted else 1.0
        out.append(Label(features, (), "prose", agreed, audit=accepted, weight=weight))
    return out


def learner_on(path: Path, whole_drafts: float = 1.0, **over: object) -> Learner:
    config = LearningConfig(
        enabled=True,
        state_dir=str(path),
        min_labels=10,
        refit_every=10,
        whole_drafts=whole_drafts,
    )
    return Learner(config, POLICY, **over)  # type: ignore[arg-type]


def a_confident_draft() -> DraftSignals:
    """A short, sure draft the shipped scorer accepts (P(wrong) about 0.09)."""
    tokens = tuple(
        TokenSignal(text=f" w{i}", p=0.99, entropy=0.01, top_k=((1, 0.99), (2, 0.005)))
        for i in range(3)
    )
    return DraftSignals(
        text="Paris is the capital of France, a city on the Seine river.",
        n_tokens=len(tokens),
        budget=128,
        finish_reason="stop",
        tokens=tokens,
    )


def test_cold_the_judge_verifies_every_draft(tmp_path: Path) -> None:
    learner = learner_on(tmp_path)
    learner._load()
    assert learner.hold.bound.threshold is None and learner.policy.threshold == VERIFY_ALL
    draft = a_confident_draft()
    assert decide(draft, POLICY).accept  # the shipped threshold would serve it
    decision = decide(draft, learner.policy)
    assert not decision.accept and decision.reasons == (SpillReason.TARGET_UNPROVEN,)
    assert decision.details[0].startswith("target_unproven: ")
    assert "no threshold holds the target" in decision.details[0]
    status = learner.status()["target"]
    assert status["threshold"] is None and status["in_force"] is None
    assert status["labels"] == 0 and status["source"] == "target"


def test_the_threshold_holds_the_target_on_the_stored_labels(tmp_path: Path) -> None:
    labels = synthetic_labels(600)
    LearningStore(tmp_path, 5000).append(labels)
    learner = learner_on(tmp_path, target=0.9)
    learner._load()
    threshold = learner.policy.threshold
    assert 0 <= threshold < 1
    # what it serves of the labels, weighted as they were drawn, holds the target
    scores = label_scores(labels, PRIOR)
    served = [(lab, s) for lab, s in zip(labels, scores, strict=True) if s <= threshold]
    weight = sum(lab.weight for lab, _ in served)
    agreement = sum(lab.weight for lab, _ in served if lab.agreed) / weight
    effective = weight**2 / sum(lab.weight**2 for lab, _ in served)
    assert lower_bound(agreement * effective, effective) >= 0.9
    # it is the rule's own threshold: the highest that holds the target (tests/routing)
    expected = threshold_for(
        scores, [lab.agreed for lab in labels], 0.9, weights=[lab.weight for lab in labels]
    )
    assert expected.threshold == threshold
    status = learner.status()["target"]
    assert status["in_force"] == round(threshold, 4) and status["served_labels"] == len(served)
    assert status["labels"] == 600 and status["lower_bound"] >= 0.9
    # a lower target serves more, a higher one less
    lower = learner_on(tmp_path, target=0.8)
    lower._load()
    higher = learner_on(tmp_path, target=0.97)
    higher._load()
    assert higher.policy.threshold < threshold < lower.policy.threshold


def test_labels_are_wanted_until_a_threshold_holds(tmp_path: Path) -> None:
    """No draft is stopped early (``setup``'s ``wants_labels``) while cold, nor while warm
    with no threshold holding the target (the ``whole_drafts`` share of them): every draft
    is verified then, and only a whole one gives the label that may let a threshold hold."""
    cold = learner_on(tmp_path / "cold", whole_drafts=0.0)
    cold._load()
    assert cold.cold and cold.keeps_whole()  # cold: every draft, whatever the share
    LearningStore(tmp_path / "warm", 5000).append(synthetic_labels(600))
    unreachable = learner_on(tmp_path / "warm", target=1.0)  # no threshold holds 100%
    unreachable._load()
    assert not unreachable.cold and unreachable.hold.verifies_all and unreachable.keeps_whole()
    # a share of them: drawn per draft
    some = learner_on(tmp_path / "warm", target=1.0, whole_drafts=0.25)
    some._load()
    some.rng.seed(0)
    assert 400 < sum(some.keeps_whole() for _ in range(2000)) < 600
    none = learner_on(tmp_path / "warm", target=1.0, whole_drafts=0.0)
    none._load()
    assert not any(none.keeps_whole() for _ in range(100))
    held = learner_on(tmp_path / "warm", target=0.9)
    held._load()
    assert not held.hold.verifies_all and not held.keeps_whole()
    explicit = learner_on(tmp_path / "warm", target=1.0, threshold=0.42)  # the user's decides
    explicit._load()
    assert not explicit.keeps_whole()


def test_an_explicit_spill_threshold_wins(tmp_path: Path) -> None:
    LearningStore(tmp_path, 5000).append(synthetic_labels(300))
    learner = learner_on(tmp_path, target=0.9, threshold=0.42)
    learner._load()
    assert learner.policy.threshold == 0.42
    status = learner.status()["target"]
    assert status["source"] == "spill_threshold" and status["in_force"] == 0.42
    assert status["threshold"] is not None and status["threshold"] != 0.42  # still shown


def test_a_refit_retargets_under_the_new_scorer(tmp_path: Path) -> None:
    """Drafts that read alike, right about capitals and wrong about letters: the prior
    cannot tell them apart (no threshold holds), the learned scorer can, and its threshold
    is chosen on out-of-fold scores, not on the ones it was fitted to."""
    labels = []
    for prompt, _, _ in questions(200):
        request = request_features({"messages": [{"role": "user", "content": prompt}]})
        agreed = prompt.startswith("What is the capital")
        labels.append(Label({**FLAT, **request.shape}, request.ngrams, "prose", agreed))
    LearningStore(tmp_path, 5000).append(labels)
    learner = learner_on(tmp_path, target=0.9)
    learner._load()
    assert learner.policy.threshold == VERIFY_ALL  # one score for all: half of them wrong
    learner._learn(refit=True)
    assert learner.version == 1
    scorer = learner.policy.scorer
    assert scorer is not None and scorer.name == "learned"
    honest = held_out_scores(labels, scorer, PRIOR, learner.config)
    assert honest != label_scores(labels, scorer)
    expected = threshold_for(honest, [lab.agreed for lab in labels], 0.9)
    assert expected.threshold is not None
    served = [lab.agreed for lab, x in zip(labels, honest, strict=True) if x <= expected.threshold]
    assert all(served) and len(served) >= 90  # capitals, nearly all of them
    assert learner.policy.threshold == expected.threshold


def test_every_process_retargets_from_the_shared_store(tmp_path: Path) -> None:
    """A worker that does not refit still moves its threshold when others add labels."""

    async def scenario() -> tuple[float, float]:
        lead, other = learner_on(tmp_path, target=0.85), learner_on(tmp_path, target=0.85)
        await lead.start()
        await other.start()
        before = other.policy.threshold
        LearningStore(tmp_path, 5000).append(synthetic_labels(300))  # another worker's
        for _ in range(200):
            if other.policy.threshold != before and lead.policy.threshold != before:
                break
            await asyncio.sleep(0.05)
        await lead.close()
        await other.close()
        return before, other.policy.threshold

    before, after = asyncio.run(scenario())
    assert before == VERIFY_ALL and 0 <= after < 1


def test_the_stats_block_adds_the_audited_agreement_of_what_was_served() -> None:
    block = target_block(
        {
            "enabled": True,
            "audits": {"n": 40, "agreed": 39},
            "target": {"target": 0.85, "threshold": 0.3, "labels": 80},
        }
    )
    assert block is not None and block["threshold"] == 0.3
    served = block["served"]
    assert served["agreement"] == 0.975 and served["holds"] is True
    assert served["lower_bound"] == round(lower_bound(39, 40), 4) < 0.975
    assert served_agreement(0, 0, 0.9)["holds"] is None
    assert served_agreement(20, 17, 0.9)["holds"] is False
    assert target_block({"enabled": False}) is None


def test_a_fresh_clone_starts_learning_into_a_state_dir_it_makes(tmp_path: Path) -> None:
    state = tmp_path / "clone" / "state"

    async def scenario() -> bool:
        learner = learner_on(state)
        await learner.start()
        for _ in range(100):  # the first look at the store (a tick) makes it
            if state.is_dir():
                break
            await asyncio.sleep(0.05)
        await learner.close()
        return learner.policy.threshold == VERIFY_ALL

    assert asyncio.run(scenario()) and state.is_dir()
