"""Early abort on the fakes: whether the draft is streamed so it can be stopped (allowed,
or not: tools, a cold learner, a cloud that cannot take over), and where it stops.

Settings are the shipped config.yaml (policy ``combined``, ``early_abort`` on,
``abort_min_token_prob`` 0.01, ``abort_min_score`` 0.5 checked every 8 tokens
(``abort_check_tokens``)); each test names the keys it overrides. A draft that is
streamed asks the local model with ``"stream": true``; a whole one has no such key.
"""

from __future__ import annotations

from pathlib import Path

from app.vocabulary import Outcome, Purpose
from tests.fakes import Reply
from tests.pipeline.flows import ASK, CONFIDENT, DOUBTFUL, Flow, cloud_fake, local_fake
from tests.support.answers import CLOUD_OTHER, GOOD_DRAFT, HEDGED

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
NO_STREAM_BUDGET = {"stream_first_token_s": None}


def test_a_doubtful_draft_is_stopped_at_its_first_check() -> None:
    flow = Flow(local_fake(DOUBTFUL), cloud_fake(CLOUD_OTHER))
    served = flow.ask(ASK)
    assert flow.local.history[0]["stream"] is True and flow.local.in_flight == 0
    draft = served.rec.draft
    assert draft is not None and draft.aborted and draft.n_tokens == 8  # abort_check_tokens
    assert served.report["draft_tokens"] == 8
    assert served.report["reasons"][0] == "early_abort" and served.rec.decision_reasons == (
        "early_abort",
    )
    assert served.text == CLOUD_OTHER and served.rec.outcome is Outcome.SPILLED_OVER
    assert served.routing_events == {"early_abort": 1}


def test_a_streamed_draft_stopped_early_has_the_clouds_stream_relayed_live() -> None:
    flow = Flow(
        local_fake(DOUBTFUL), cloud_fake(CLOUD_OTHER), speculative_decoding=NO_STREAM_BUDGET
    )
    served = flow.ask({**ASK, "stream": True})
    assert served.text == CLOUD_OTHER and served.model_used == "cerebras"
    assert served.report["reasons"] == ["early_abort", "draft_aborted"]
    assert flow.cloud.history[0]["stream"] is True
    assert served.purposes == [("local", Purpose.DRAFT), ("cerebras", Purpose.SPILL)]


def test_a_token_under_the_floor_stops_the_draft_there() -> None:
    text = HEDGED
    p = [0.99] * 17
    p[3] = 0.005  # under abort_min_token_prob 0.01
    flow = Flow(local_fake(Reply(text, token_probs=p)), cloud_fake(CLOUD_OTHER))
    served = flow.ask(ASK)
    draft = served.rec.draft
    assert draft is not None and draft.aborted and draft.n_tokens == 4
    assert served.report["reasons"][0] == "early_abort" and served.model_used == "cerebras"


def test_with_early_abort_off_the_draft_comes_whole() -> None:
    spec = {"early_abort": False}
    flow = Flow(local_fake(DOUBTFUL), cloud_fake(CLOUD_OTHER), speculative_decoding=spec)
    served = flow.ask(ASK)
    assert "stream" not in flow.local.history[0]
    assert served.rec.draft is not None and not served.rec.draft.aborted
    assert served.report["draft_tokens"] == 18


def test_a_request_with_tools_is_drafted_whole() -> None:
    # llama-server refuses logprobs with tools on a stream.
    flow = Flow(local_fake(CONFIDENT), cloud_fake())
    served = flow.ask({**ASK, "tools": TOOLS})
    assert "stream" not in flow.local.history[0] and flow.local.history[0]["tools"] == TOOLS
    assert served.text == GOOD_DRAFT and served.report["accepted"]


def test_a_cold_learner_has_drafts_run_whole(tmp_path: Path) -> None:
    # A label needs the whole draft judged: none is stopped early while the learner is cold
    # (the draft first, as when no slot is free to finish it beside the cloud's answer).
    learning = {
        "enabled": True,
        "state_dir": str(tmp_path),
        "audit_rate": 0,
        "cold_audit_rate": 0,
        "cloud_until_held": False,
    }
    flow = Flow(
        local_fake(DOUBTFUL),
        cloud_fake(CLOUD_OTHER),
        learning=learning,
        speculative_decoding=NO_STREAM_BUDGET,
    )
    served = flow.ask(ASK)
    assert "stream" not in flow.local.history[0]
    assert served.rec.draft is not None and not served.rec.draft.aborted
    assert served.report["reasons"] == ["target_unproven", "polarity_differs"]  # facts, shipped
    assert served.rec.agreement is False and served.rec.features is not None  # its label


def test_a_cloud_that_cannot_take_over_leaves_the_draft_to_run_whole() -> None:
    cloud = cloud_fake()
    cloud.open_circuit()
    flow = Flow(local_fake(DOUBTFUL), cloud)
    served = flow.ask(ASK)
    assert "stream" not in flow.local.history[0]
    assert served.rec.draft is not None and not served.rec.draft.aborted
    assert served.text == HEDGED and served.report["degraded"]
    assert served.report["draft_tokens"] == 18
    assert served.purposes == [("local", Purpose.DRAFT)] and cloud.history == []
