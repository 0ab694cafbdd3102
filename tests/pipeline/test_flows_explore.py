"""The gate's cloud lane explored (``gate.explore``), on the fakes: the cloud is called
once, its answer served at once, and a draft made beside it is judged against that answer
for a label (``app.pipeline.verify.LateDrafts.explore``); with no share nothing is
drafted. Ordered by events, never by sleeping: the draft is held (``wait_for``) until the
client has its answer, so a proxy that waited for the draft would fail the guard.

The learner's state holds the two kinds' labels (``tests.support.gate_labels``) and the
gate fitted on them: ``WRONG`` takes the cloud lane. Audits are off.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.vocabulary import Outcome, Purpose
from tests.fakes.script import tokenize
from tests.pipeline.flows import (
    CONFIDENT,
    JSON,
    Flow,
    cloud_fake,
    guarded,
    local_fake,
    read_past,
    streamed,
    until,
)
from tests.support.answers import CLOUD_OTHER, GOOD_DRAFT
from tests.support.fake_upstream import FakeUpstream
from tests.support.gate_labels import WRONG, fit_gate_into, two_kinds

ASK_WRONG: JSON = {"messages": [{"role": "user", "content": WRONG}]}


def explored(tmp_path: Path, local: FakeUpstream, cloud: FakeUpstream, share: float) -> Flow:
    """A flow whose gate sends ``WRONG`` to the cloud lane, exploring ``share`` of it."""
    fit_gate_into(tmp_path, two_kinds())
    learning = {"enabled": True, "state_dir": str(tmp_path), "audit_rate": 0.0}
    spec = {"spill_threshold": 0.5, "gate": {"explore": share}}
    off = {"enabled": False}  # a repeated request reaches the fakes
    flow = Flow(local, cloud, learning=learning, speculative_decoding=spec, cache=off)
    asyncio.run(flow.pipeline.start())  # loads the labels' count and the gate
    return flow


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_explored_request_is_answered_by_one_cloud_call_before_its_draft_ends(
    tmp_path: Path, stream: bool
) -> None:
    held = asyncio.Event()
    local, cloud = local_fake(CONFIDENT, wait_for=held), cloud_fake(CLOUD_OTHER)
    flow = explored(tmp_path, local, cloud, 1.0)
    learner = flow.pipeline.learner
    assert learner is not None

    async def run() -> None:
        served = await flow.chat(streamed(ASK_WRONG) if stream else ASK_WRONG)
        # the client has the whole answer while the draft is still held
        assert served.text == CLOUD_OTHER and served.model_used == "cerebras"
        report = served.report
        assert report["lane"] == "cloud" and report["reasons"] == ["gate_cloud"]
        assert report["draft_tokens"] == 0 and served.rec.outcome is Outcome.SPILLED_OVER
        assert served.purposes == [("cerebras", Purpose.SPILL)]  # a spill, as unexplored
        assert len(cloud.history) == 1 and bool(cloud.history[0].get("stream")) is stream
        assert len(local.history) == 1 and learner.tally.labels == 0  # drafting, not done
        assert "stream" not in local.history[0]  # the draft is whole, never streamed out
        held.set()
        await until(lambda: learner.tally.explored == 1)

    asyncio.run(guarded(run()))
    tally = learner.tally
    assert (tally.labels, tally.agreed, tally.late) == (1, 0, 0)  # it disagreed
    assert len(cloud.history) == 1  # the label cost no cloud call
    assert flow.stats.get_metrics()["lanes"] == {"cloud": 1}


def test_a_draft_that_ends_before_the_record_counts_its_tokens_there(tmp_path: Path) -> None:
    held = asyncio.Event()
    local, cloud = local_fake(CONFIDENT, wait_for=held), cloud_fake(GOOD_DRAFT)
    flow = explored(tmp_path, local, cloud, 1.0)
    learner = flow.pipeline.learner
    assert learner is not None

    # the draft comes while the client is still reading the cloud's stream
    done = read_past(flow, streamed(ASK_WRONG), held, lambda: learner.tally.explored == 1)
    asyncio.run(guarded(done))
    assert (learner.tally.labels, learner.tally.agreed) == (1, 1)  # what the cloud said
    rec = flow.telemetry.records[-1]
    assert rec.lane == "cloud" and rec.agreement is None  # the label is the learner's only
    whole = len(tokenize(GOOD_DRAFT)) + 1  # as llama-server counts it: its end token too
    drafts = [u.completion_tokens for u in rec.usage if u.purpose is Purpose.DRAFT]
    assert drafts == [whole] and rec.local_tokens == whole


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_with_no_share_the_cloud_lane_drafts_nothing(tmp_path: Path, stream: bool) -> None:
    local, cloud = local_fake(CONFIDENT), cloud_fake(CLOUD_OTHER)
    flow = explored(tmp_path, local, cloud, 0.0)
    served = flow.ask(streamed(ASK_WRONG) if stream else ASK_WRONG)
    assert served.report["lane"] == "cloud" and served.text == CLOUD_OTHER
    assert local.history == [] and len(cloud.history) == 1
    learner = flow.pipeline.learner
    assert learner is not None and learner.tally.labels == 0


def test_an_explored_request_whose_cloud_fails_is_drafted_after_all(tmp_path: Path) -> None:
    local, cloud = local_fake(CONFIDENT, CONFIDENT), cloud_fake()
    cloud.enqueue(cloud.error("unavailable"))
    flow = explored(tmp_path, local, cloud, 1.0)
    served = flow.ask(ASK_WRONG)
    assert served.report["lane"] == "cloud" and served.model_used == "local"
    assert served.rec.outcome is Outcome.ACCEPTED and len(cloud.history) == 1
    assert ("cerebras", "unavailable") in served.rec.upstream_errors
    learner = flow.pipeline.learner
    assert learner is not None and learner.tally.explored == 0  # nothing to judge it by


def test_explore_shares_the_late_drafts_cap(tmp_path: Path) -> None:
    held = asyncio.Event()
    local = local_fake(CONFIDENT, CONFIDENT, wait_for=held)
    cloud = cloud_fake(CLOUD_OTHER, CLOUD_OTHER)
    flow = explored(tmp_path, local, cloud, 1.0)  # learning.late_drafts: 1, as shipped

    async def run() -> None:
        await flow.chat(ASK_WRONG)
        await flow.chat(ASK_WRONG)  # the first draft still runs: no room for a second
        assert len(local.history) == 1 and len(cloud.history) == 2
        held.set()
        await until(lambda: not flow.pipeline.speculator.late.running)

    asyncio.run(guarded(run()))
