"""The gate's lanes on the fakes: a ``local`` request's accepted draft calls no cloud,
streamed or not (a doubted one is verified); a ``cloud`` request never drafts (and is
drafted after all when the cloud fails); a cold learner puts every request in
``uncertain``, today's flow.

The learner's state holds labels of two kinds (``tests.support.gate_labels``): drafts
for a capital always agree with the cloud, drafts counting letters never do; the gate is
fitted on them as the leading learner does, and the pipeline loads it at start. Audits
are off (``audit_rate`` 0) so every cloud call the fake counts is the flow's own.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.telemetry.spec_log import spec_log_entry
from app.vocabulary import Outcome, Purpose
from tests.pipeline.flows import (
    CONFIDENT,
    DOUBTFUL,
    JSON,
    Flow,
    cloud_fake,
    local_fake,
    streamed,
)
from tests.support.answers import CLOUD_OTHER
from tests.support.fake_upstream import FakeUpstream
from tests.support.gate_labels import RIGHT, WRONG, fit_gate_into, two_kinds


def ask(prompt: str) -> JSON:
    return {"messages": [{"role": "user", "content": prompt}]}


def gated(tmp_path: Path, local: FakeUpstream, cloud: FakeUpstream, **learning: Any) -> Flow:
    """A flow whose learner holds the two kinds' labels and the gate fitted on them. The
    labels carry only what the gate reads, so no judge's threshold holds the target on
    them (every draft would be verified): the judge's threshold is set explicitly."""
    fit_gate_into(tmp_path, two_kinds())
    config = {"enabled": True, "state_dir": str(tmp_path), "audit_rate": 0.0, **learning}
    judge = {"spill_threshold": 0.5, "gate": {"explore": 0.0}}  # explored: test_flows_explore
    flow = Flow(local, cloud, learning=config, speculative_decoding=judge)
    asyncio.run(flow.pipeline.start())  # loads the labels' count and the gate
    return flow


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_local_lane_serves_an_accepted_draft_without_calling_the_cloud(
    tmp_path: Path, stream: bool
) -> None:
    cloud = cloud_fake(CLOUD_OTHER)
    flow = gated(tmp_path, local_fake(CONFIDENT), cloud)
    served = flow.ask(streamed(ask(RIGHT)) if stream else ask(RIGHT))
    assert served.model_used == "local" and served.report["accepted"]
    assert served.report["lane"] == "local" and served.rec.lane == "local"
    assert cloud.history == []  # no hedge, no first-token budget: nothing asked of it
    assert not served.rec.hedged and served.purposes == [("local", Purpose.DRAFT)]
    assert served.rec.gate_p_wrong is not None and served.rec.gate_p_wrong < 0.05
    assert served.stats is not None and served.stats.get_metrics()["lanes"] == {"local": 1}
    assert orjson.loads(orjson.dumps(served.stats.state()))["lanes"] == {"local": 1}  # to peers
    line = spec_log_entry(served.rec, 0)  # the speculation log's line for it
    assert line["lane"] == "local" and line["gate_p_wrong"] == round(served.rec.gate_p_wrong, 4)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_local_lane_calls_the_cloud_for_a_doubted_draft(tmp_path: Path, stream: bool) -> None:
    cloud = cloud_fake(CLOUD_OTHER)
    flow = gated(tmp_path, local_fake(DOUBTFUL), cloud)
    served = flow.ask(streamed(ask(RIGHT)) if stream else ask(RIGHT))
    assert served.report["lane"] == "local" and not served.report["accepted"]
    assert len(cloud.history) == 1 and served.text == CLOUD_OTHER
    assert served.rec.outcome is Outcome.SPILLED_OVER


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_cloud_lane_never_drafts(tmp_path: Path, stream: bool) -> None:
    local, cloud = local_fake(CONFIDENT), cloud_fake(CLOUD_OTHER)
    flow = gated(tmp_path, local, cloud)
    served = flow.ask(streamed(ask(WRONG)) if stream else ask(WRONG))
    assert local.history == []  # no draft at all
    assert len(cloud.history) == 1 and bool(cloud.history[0].get("stream")) is stream
    assert served.text == CLOUD_OTHER and served.model_used == "cerebras"
    report = served.report
    assert report["lane"] == "cloud" and report["spilled_over"] and not report["accepted"]
    assert report["reasons"] == ["gate_cloud"] and report["draft_tokens"] == 0
    assert served.rec.outcome is Outcome.SPILLED_OVER and served.rec.lane == "cloud"
    assert served.purposes == [("cerebras", Purpose.SPILL)]
    assert served.rec.gate_p_wrong is not None and served.rec.gate_p_wrong > 0.9
    assert served.stats is not None and served.stats.get_metrics()["lanes"] == {"cloud": 1}


def test_a_cloud_lane_whose_cloud_fails_is_drafted_after_all(tmp_path: Path) -> None:
    local, cloud = local_fake(CONFIDENT), cloud_fake()
    cloud.enqueue(cloud.error("unavailable"))
    flow = gated(tmp_path, local, cloud)
    served = flow.ask(ask(WRONG))
    assert served.report["lane"] == "cloud" and served.model_used == "local"
    assert len(local.history) == 1 and served.rec.outcome is Outcome.ACCEPTED
    assert ("cerebras", "unavailable") in served.rec.upstream_errors


def test_a_cold_learner_puts_every_request_in_the_uncertain_lane(tmp_path: Path) -> None:
    # the gate is there, but the store holds fewer labels than min_labels
    local, cloud = local_fake(CONFIDENT), cloud_fake(CLOUD_OTHER)
    flow = gated(tmp_path, local, cloud, min_labels=1000, max_labels=5000)
    served = flow.ask(ask(WRONG))
    assert served.report["lane"] == "uncertain" and served.rec.gate_p_wrong is None
    assert len(local.history) == 1 and served.model_used == "local"
