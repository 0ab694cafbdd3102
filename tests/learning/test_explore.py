"""Exploring the gate's cloud lane (``gate.explore``), without servers: which requests are
explored, what an explored label weighs, and that the learner keeps and counts it apart.

The flows themselves (one cloud call, the draft in the background, the label) run on the
fakes in tests/pipeline/test_flows_explore.py and through the running proxy in
tests/learning/test_explore_proxy.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.composition import build_policy
from app.config import LearningConfig, SpeculativeConfig
from app.learning.gate_fit import GateKeeper
from app.learning.learner import Learner
from app.learning.store import LearningStore
from app.routing.gate import Lane, explored_weight, explores
from tests.support.gate_labels import WRONG, label

SHARES = st.floats(min_value=0.0, max_value=1.0)
DRAWS = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)


@given(lane=st.sampled_from(list(Lane)), share=SHARES, draw=DRAWS)
def test_only_cloud_lane_requests_are_explored_and_only_under_the_share(
    lane: Lane, share: float, draw: float
) -> None:
    assert explores(lane, share, draw) is (lane is Lane.CLOUD and draw < share)
    assert not explores(lane, 0.0, draw)  # 0: off
    assert explores(Lane.CLOUD, 1.0, draw)  # 1: every cloud-lane request


@given(share=st.floats(min_value=1e-6, max_value=1.0))
def test_an_explored_label_weighs_its_inverse_propensity(share: float) -> None:
    assert explored_weight(share) == pytest.approx(1 / share)
    assert explored_weight(share) >= 1.0


def test_no_share_gives_no_weight() -> None:
    with pytest.raises(ValueError):
        explored_weight(0.0)


def test_the_learner_weighs_explored_labels_and_counts_them_apart(tmp_path: Path) -> None:
    config = LearningConfig(enabled=True, state_dir=str(tmp_path))
    policy = build_policy(SpeculativeConfig(policy="combined"))
    features = dict(label(WRONG, agreed=True).features)

    async def scenario() -> Learner:
        gate = GateKeeper(tmp_path, target=0.95, cloud_max_agreement=0.2, explore=0.25)
        learner = Learner(config, policy, gate=gate)
        await learner.start()
        assert learner.explore_now() in (True, False)
        learner.observe_late(features, (1, 2), "prose", True, explored=True)
        learner.observe_late(features, (1, 2), "prose", False)  # a late draft, as before
        await learner.close()  # writes what is queued
        return learner

    learner = asyncio.run(scenario())
    labels = learner.status()["labels"]
    assert (labels["total"], labels["explored"], labels["late"], labels["agreed"]) == (2, 1, 1, 1)
    assert learner.status()["gate"]["explore"] == 0.25
    stored = LearningStore(tmp_path, 100).read()
    assert [(lab.agreed, lab.weight, lab.audit) for lab in stored] == [
        (True, 4.0, False),
        (False, 1.0, False),
    ]


def test_a_learner_without_a_share_never_explores(tmp_path: Path) -> None:
    config = LearningConfig(enabled=True, state_dir=str(tmp_path))
    policy = build_policy(SpeculativeConfig(policy="combined"))
    off = Learner(config, policy, gate=GateKeeper(tmp_path, target=0.95, cloud_max_agreement=0.2))
    always = GateKeeper(tmp_path, target=0.95, cloud_max_agreement=0.2, explore=1.0)
    assert not any(off.explore_now() for _ in range(100))
    assert not Learner(config, policy).explore_now()  # no gate at all
    assert all(Learner(config, policy, gate=always).explore_now() for _ in range(100))
