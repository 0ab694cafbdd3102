"""A draft left running for a label after its stream was relayed from the cloud, on the
fakes (``app.pipeline.verify.LateDrafts``): ordered by events, never by sleeping.

The label itself, and the client's stream not waiting for the draft, are shown through
the running proxy in tests/learning/test_late_drafts.py; here what only the pipeline
shows: the draft's tokens in the record while it is still open, and ``Pipeline.close``
cancelling a draft still running.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from app.vocabulary import Outcome, Purpose
from tests.fakes import Reply
from tests.fakes.script import tokenize
from tests.pipeline.flows import (
    ASK,
    CONFIDENT,
    Flow,
    cloud_fake,
    guarded,
    local_fake,
    read_past,
    streamed,
)
from tests.support.answers import GOOD_DRAFT


def late_flow(local_gate: asyncio.Event, cloud: Any, state: Path) -> tuple[Flow, Any]:
    """Learning on (cold: no audits), a first-token budget of 0 s: the cloud's stream wins."""
    local = local_fake(CONFIDENT, wait_for=local_gate)
    flow = Flow(
        local,
        cloud,
        speculative_decoding={"stream_first_token_s": 0, "gate": {"enabled": False}},
        # the draft goes first, as with a threshold in force: the stream's budget runs out
        learning={
            "enabled": True,
            "state_dir": str(state),
            "cold_audit_rate": 0.0,
            "cloud_until_held": False,
        },
    )
    return flow, local


def test_a_late_draft_that_ends_before_the_record_counts_its_tokens_there(tmp_path: Path) -> None:
    local_gate = asyncio.Event()
    flow, _ = late_flow(local_gate, cloud_fake(Reply(GOOD_DRAFT)), tmp_path)

    learner = flow.pipeline.learner
    assert learner is not None
    # the cloud's stream flows with no label yet; the draft comes while the client reads
    done = read_past(
        flow,
        streamed(ASK),
        local_gate,
        lambda: learner.tally.late == 1,
        before=lambda: learner.tally.labels == 0,
    )
    asyncio.run(guarded(done))
    rec = flow.telemetry.records[-1]
    assert rec.outcome is Outcome.SPILLED_OVER and rec.agreement is None  # not the record's
    drafts = [u for u in rec.usage if u.purpose is Purpose.DRAFT]
    whole = len(tokenize(GOOD_DRAFT)) + 1  # as llama-server counts it: its end token too
    assert [u.completion_tokens for u in drafts] == [0, whole]  # none by the budget; then all
    assert rec.local_tokens == whole


def test_close_cancels_a_draft_still_running(tmp_path: Path) -> None:
    flow, local = late_flow(asyncio.Event(), cloud_fake(Reply(GOOD_DRAFT)), tmp_path)

    async def run() -> None:
        served = await flow.chat(streamed(ASK))
        assert served.model_used == "cerebras"
        assert local.in_flight == 1  # left running for its label
        await flow.pipeline.close()
        assert local.in_flight == 0
        learner = flow.pipeline.learner
        assert learner is not None and learner.tally.labels == 0

    asyncio.run(guarded(run()))
