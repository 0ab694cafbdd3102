"""The gate's fit (app.learning.gate_fit): it reads the question, keeps its thresholds
honest (out of fold, by question), is written where every process reloads it, is fitted by a learner
that starts with labels and no gate, and serves nothing but ``uncertain`` while cold."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.composition import build_policy
from app.config import LearningConfig, SpeculativeConfig
from app.learning.gate_fit import GateKeeper, fit_gate
from app.learning.learner import Learner
from app.routing.gate import Lane
from app.routing.request_features import request_features
from tests.support.coin_tosses import memorable
from tests.support.gate_labels import RIGHT, WRONG, label, store_labels, two_kinds


def lane(keeper: GateKeeper, prompt: str, *, cold: bool = False) -> Lane:
    request = request_features({"messages": [{"role": "user", "content": prompt}]})
    return keeper.lane(request, cold=cold)[0]


def test_the_gate_reads_the_request_only_and_tells_the_kinds_apart() -> None:
    gate = fit_gate(two_kinds(), target=0.95, cloud_max_agreement=0.2)
    assert gate is not None and all(f.startswith("req_") for f in gate.scorer.features)
    assert gate.local_at is not None and gate.cloud_from is not None
    right = gate.score(request_features({"messages": [{"role": "user", "content": RIGHT}]}))
    wrong = gate.score(request_features({"messages": [{"role": "user", "content": WRONG}]}))
    assert gate.lane(right) is Lane.LOCAL and gate.lane(wrong) is Lane.CLOUD


def test_too_few_labels_hold_no_target() -> None:
    # 20 agreeing labels of a kind: its one-sided bound is under 0.95, so nothing is local
    gate = fit_gate(two_kinds(20), target=0.95, cloud_max_agreement=0.2)
    assert gate is not None and gate.local_at is None
    assert fit_gate([label(RIGHT, agreed=True)] * 3, target=0.95, cloud_max_agreement=0.2) is None


def test_a_repeated_question_does_not_make_the_local_lane_look_safe() -> None:
    """Coin tosses (half agree), each question asked twice, 20 label sets: folded by
    label, a copy is scored by a fit that saw the other, the agreeing questions look known
    and 0.7 held on 12 of the 20; folded by question, the gate has nothing it could serve
    (at most the bound's 5% of sets may hold by chance)."""
    held = 0
    for seed in range(20):
        once = memorable(300, seed=seed)
        gate = fit_gate(once + once, target=0.7, cloud_max_agreement=0.2)
        assert gate is not None
        held += gate.local_at is not None
    assert held <= 1


def test_one_question_gives_no_gate() -> None:
    asked = [label(WRONG, agreed=i % 2 == 0) for i in range(40)]
    assert fit_gate(asked, target=0.8, cloud_max_agreement=0.2) is None


def test_a_mixed_kind_stays_uncertain() -> None:
    mixed = [label(WRONG, agreed=i % 2 == 0) for i in range(160)]
    gate = fit_gate(two_kinds() + mixed, target=0.95, cloud_max_agreement=0.2)
    assert gate is not None
    p_wrong = gate.score(request_features({"messages": [{"role": "user", "content": WRONG}]}))
    assert gate.lane(p_wrong) is Lane.UNCERTAIN


def test_a_fitted_gate_is_reloaded_by_another_process_and_cold_is_uncertain(
    tmp_path: Path,
) -> None:
    leader = GateKeeper(tmp_path, target=0.95, cloud_max_agreement=0.2)
    leader.refit(two_kinds())
    other = GateKeeper(tmp_path, target=0.95, cloud_max_agreement=0.2)
    assert other.gate is None and lane(other, WRONG) is Lane.UNCERTAIN
    other.reload()
    assert other.gate == leader.gate
    assert (lane(other, RIGHT), lane(other, WRONG)) == (Lane.LOCAL, Lane.CLOUD)
    assert lane(other, WRONG, cold=True) is Lane.UNCERTAIN
    assert other.status()["fitted"] and other.status()["labels"] == 240


def test_a_gate_fitted_for_another_target_is_not_used(tmp_path: Path) -> None:
    # the config's target_agreement raised: the old gate's local lane holds the old one
    GateKeeper(tmp_path, target=0.8, cloud_max_agreement=0.2).refit(two_kinds())
    stricter = GateKeeper(tmp_path, target=0.95, cloud_max_agreement=0.2)
    stricter.reload()
    assert stricter.gate is None and lane(stricter, RIGHT) is Lane.UNCERTAIN
    assert stricter.due  # so the next refit fits one for 0.95
    same = GateKeeper(tmp_path, target=0.8, cloud_max_agreement=0.2)
    same.reload()
    assert same.gate is not None and same.gate.target == 0.8


def test_a_learner_that_starts_with_labels_fits_its_gate(tmp_path: Path) -> None:
    store_labels(tmp_path, two_kinds())
    config = LearningConfig(enabled=True, state_dir=str(tmp_path), min_labels=50)
    policy = build_policy(SpeculativeConfig(policy="combined"))

    async def scenario() -> GateKeeper:
        gate = GateKeeper(tmp_path, target=0.95, cloud_max_agreement=0.2)
        learner = Learner(config, policy, gate=gate)
        await learner.start()
        assert not learner.cold and learner.gate.gate is None  # none fitted before the start
        for _ in range(100):  # the first tick (1 s) finds it due
            await asyncio.sleep(0.05)
            if learner.gate.gate is not None:
                break
        await learner.close()
        assert "gate" in learner.status()
        return learner.gate

    keeper = asyncio.run(scenario())
    assert keeper.gate is not None and (tmp_path / "gate.json").exists()
    assert (lane(keeper, RIGHT), lane(keeper, WRONG)) == (Lane.LOCAL, Lane.CLOUD)
