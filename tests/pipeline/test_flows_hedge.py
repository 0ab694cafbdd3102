"""Hedging and the first-token budget on the fakes: the cloud called alongside the draft
(off, auto, always; whole or streamed), its answer first, its answer standing in for the
verification, and a stream's first-token budget (the draft in time, not in time, trusted).

Settings are the shipped config.yaml (policy ``combined``, whose fitted spill rates are
code 0.95, math 1.0, prose 0.76; ``hedge: auto`` at ``hedge_min_prior`` 0.8, so code
hedges and prose does not; ``stream_first_token_s`` 0.25, ``stream_trust_score`` 0.1,
``stream_trust_s`` 1.0; ``early_abort`` on, checked every 8 tokens); each test names the
keys it overrides. A fake held by a ``wait_for`` gate that is never set is a call still
in flight when the request is done with it.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from app.vocabulary import Outcome, Purpose
from tests.fakes import Reply
from tests.pipeline.flows import (
    ASK,
    CODE_ASK,
    CONFIDENT,
    DOUBTFUL,
    Flow,
    Served,
    cloud_fake,
    guarded,
    local_fake,
    probs,
    release_after,
    release_when,
    streamed,
)
from tests.support.answers import CLOUD_OTHER, CLOUD_SAME, GOOD_DRAFT, HEDGED

TURNS = 20  # loop turns past a first-token deadline of 0 s: it has been checked by then


def held() -> asyncio.Event:
    """A gate no one sets: the fake behind it never answers."""
    return asyncio.Event()


# -- hedge: off / auto / always, whole ------------------------------------------------------


def test_hedge_off_calls_the_cloud_only_after_the_draft_is_doubted() -> None:
    spec = {"hedge": "off", "early_abort": False}
    flow = Flow(local_fake(DOUBTFUL), cloud_fake(CLOUD_OTHER), speculative_decoding=spec)
    served = flow.ask(CODE_ASK)
    assert served.rec.context_type == "code" and not served.rec.hedged
    assert served.purposes == [("local", Purpose.DRAFT), ("cerebras", Purpose.SPILL)]
    assert "hedged" not in served.report["reasons"] and served.text == CLOUD_OTHER


def test_hedge_auto_leaves_a_prose_request_to_its_draft() -> None:
    flow = Flow(local_fake(CONFIDENT), cloud_fake(), speculative_decoding={"hedge": "auto"})
    served = flow.ask(ASK)
    assert served.rec.context_type == "prose" and not served.rec.hedged
    assert flow.cloud.history == [] and served.model_used == "local"


def test_hedge_auto_serves_a_code_requests_cloud_answer_when_it_comes_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "specproxy.pipeline")
    local = local_fake(CONFIDENT, wait_for=held())
    flow = Flow(local, cloud_fake(CLOUD_OTHER), speculative_decoding={"hedge": "auto"})
    served = flow.ask(CODE_ASK)
    assert served.text == CLOUD_OTHER and served.model_used == "cerebras"
    report = served.report
    assert report["reasons"] == ["hedged", "cloud_first"] and report["spilled_over"]
    assert report["draft_tokens"] == 0 and served.rec.hedged
    assert served.rec.outcome is Outcome.SPILLED_OVER
    assert served.purposes == [("cerebras", Purpose.HEDGE)]  # the draft was cancelled unread
    assert len(flow.local.history) == 1 and flow.local.in_flight == 0  # asked, then stopped
    assert "stream" not in flow.cloud.history[0]  # the whole answer, alongside
    assert "Hedging: calling Cerebras alongside the draft" in caplog.messages
    assert "Hedged cloud answer came first; draft cancelled" in caplog.messages
    assert served.routing_events == {"hedged": 1, "cloud_first": 1}


def test_hedge_always_is_stopped_in_flight_when_the_draft_is_served() -> None:
    cloud = cloud_fake(CLOUD_OTHER, wait_for=held())
    flow = Flow(local_fake(CONFIDENT), cloud, speculative_decoding={"hedge": "always"})
    served = flow.ask(ASK)
    assert served.model_used == "local" and served.report["accepted"] and served.rec.hedged
    assert len(cloud.history) == 1 and cloud.in_flight == 0  # asked, then cancelled
    cancelled = served.rec.usage[-1]
    assert (cancelled.model, cancelled.purpose) == ("cerebras", Purpose.HEDGE_CANCELLED)
    assert cancelled.estimated and cancelled.completion_tokens == 0


def test_a_hedge_still_in_flight_for_a_doubted_draft_stands_in_for_the_verification() -> None:
    spec = {"hedge": "always", "early_abort": False}
    flow = Flow(local_fake(DOUBTFUL), cloud_fake(CLOUD_OTHER), speculative_decoding=spec)
    gate = asyncio.Event()
    flow.cloud.wait_for = gate

    async def chat() -> Served:
        # The cloud answers once the draft is in: the draft is judged, and the hedge used.
        drafted = asyncio.ensure_future(
            release_when(gate, lambda: bool(flow.local.history) and not flow.local.in_flight)
        )
        served = await flow.chat(ASK)
        await drafted
        return served

    served = asyncio.run(guarded(chat()))
    assert served.text == CLOUD_OTHER and served.model_used == "cerebras"
    assert served.report["reasons"] == ["low_confidence", "hedged", "polarity_differs"]  # facts
    assert len(flow.cloud.history) == 1  # no second call: the hedge was the verification
    assert served.purposes == [("local", Purpose.DRAFT), ("cerebras", Purpose.HEDGE)]
    assert served.rec.outcome is Outcome.SPILLED_OVER


def test_a_hedge_that_failed_leaves_the_doubted_draft_to_a_fresh_verification() -> None:
    spec = {"hedge": "always", "early_abort": False}
    cloud = cloud_fake(name="cerebras")
    cloud.enqueue(cloud.error("timeout"), CLOUD_SAME)
    flow = Flow(local_fake(DOUBTFUL), cloud, speculative_decoding=spec)
    served = flow.ask(ASK)
    assert len(cloud.history) == 2  # the hedge, then the verification
    assert served.text == HEDGED and served.rec.outcome is Outcome.VERIFIED_DRAFT_USED
    assert "hedged" not in served.report["reasons"]
    assert served.rec.upstream_errors == [("cerebras", "timeout")]
    assert served.purposes == [("local", Purpose.DRAFT), ("cerebras", Purpose.VERIFICATION)]


# -- the first-token budget (streams) -----------------------------------------------------


def test_a_draft_accepted_within_the_first_token_budget_is_served_and_the_hedge_stopped() -> None:
    spec = {"stream_first_token_s": 30, "stream_trust_s": 60}
    cloud = cloud_fake(CLOUD_OTHER, wait_for=held())
    flow = Flow(local_fake(CONFIDENT), cloud, speculative_decoding=spec)
    served = flow.ask(streamed(ASK))
    assert served.text == GOOD_DRAFT and served.model_used == "local" and served.report["accepted"]
    assert cloud.history[0]["stream"] is True  # every stream under a budget is hedged live
    assert served.rec.hedged and cloud.in_flight == 0
    assert served.purposes[-1] == ("cerebras", Purpose.HEDGE_CANCELLED)
    assert not served.rec.trusted


def test_a_draft_not_in_by_the_first_token_budget_gives_way_to_the_clouds_stream(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "specproxy.pipeline")
    spec = {"stream_first_token_s": 0}
    local = local_fake(CONFIDENT, wait_for=held())
    flow = Flow(local, cloud_fake(CLOUD_OTHER), speculative_decoding=spec)
    served = flow.ask(streamed(ASK))
    assert served.text == CLOUD_OTHER and served.model_used == "cerebras"
    assert served.report["reasons"] == ["hedged", "first_token_budget"]
    assert served.report["spilled_over"] and served.rec.outcome is Outcome.SPILLED_OVER
    assert local.in_flight == 0  # the draft was stopped
    draft, hedge = served.rec.usage
    assert (draft.model, draft.purpose, draft.completion_tokens, draft.estimated) == (
        "local",
        Purpose.DRAFT,
        0,
        True,
    )
    assert (hedge.model, hedge.purpose) == ("cerebras", Purpose.HEDGE)
    assert "First-token budget spent: streaming Cerebras live; draft cancelled" in caplog.messages
    assert served.routing_events == {"hedged": 1, "first_token_budget": 1}


def test_with_hedge_off_the_clouds_stream_opens_only_at_the_first_token_deadline() -> None:
    spec = {"stream_first_token_s": 0, "hedge": "off"}
    local = local_fake(CONFIDENT, wait_for=held())
    flow = Flow(local, cloud_fake(CLOUD_OTHER), speculative_decoding=spec)
    served = flow.ask(streamed(ASK))
    assert served.text == CLOUD_OTHER and served.report["reasons"] == [
        "hedged",
        "first_token_budget",
    ]
    assert len(flow.cloud.history) == 1 and flow.cloud.history[0]["stream"] is True


def test_a_likely_spill_goes_to_the_clouds_stream_as_soon_as_it_flows() -> None:
    # Code spills often enough (0.95 >= 0.8) that its stream does not wait out the budget.
    local = local_fake(CONFIDENT, wait_for=held())
    flow = Flow(
        local,
        cloud_fake(CLOUD_OTHER),
        speculative_decoding={"stream_first_token_s": 30, "stream_trust_s": 60},
    )
    served = flow.ask(streamed(CODE_ASK))
    assert served.text == CLOUD_OTHER and served.report["reasons"] == [
        "hedged",
        "first_token_budget",
    ]


def test_a_draft_trusted_at_the_first_token_budget_is_waited_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "specproxy.pipeline")
    spec = {"stream_first_token_s": 0, "stream_trust_s": 30}
    draft_gate = asyncio.Event()
    # 12 events (role, 11 tokens) stream, then the draft waits: the budget is spent with a
    # prefix the scorer trusts (P(wrong) <= 0.1 after at least 8 tokens).
    local = local_fake(CONFIDENT, wait_for=draft_gate, hold_after=12)
    cloud = cloud_fake(CLOUD_OTHER)  # its stream flows at once: only trust keeps the draft
    flow = Flow(local, cloud, speculative_decoding=spec)

    async def chat() -> Served:
        # Held until the deadline has been checked: then the draft comes while trusted.
        release = asyncio.ensure_future(release_after(draft_gate, TURNS))
        served = await flow.chat(streamed(ASK))
        await release
        return served

    served = asyncio.run(guarded(chat()))
    assert served.text == GOOD_DRAFT and served.model_used == "local"
    assert served.rec.trusted and served.report["accepted"]
    assert (
        "First-token budget spent: draft trusted so far (P(wrong) <= 0.1), waited for"
        in caplog.messages
    )
    assert served.routing_events == {"hedged": 1, "first_token_trusted": 1}


def test_a_draft_doubted_within_the_budget_is_verified_by_the_hedges_live_stream() -> None:
    spec = {"stream_first_token_s": 0, "early_abort": False}
    gate = asyncio.Event()
    # The hedge's stream sends its first batch, then waits: its whole answer is not in by the
    # deadline, so it is relayed live, and comes once the client reads.
    cloud = cloud_fake(CLOUD_OTHER, wait_for=gate, hold_after=1)
    flow = Flow(local_fake(DOUBTFUL), cloud, speculative_decoding=spec)
    served = asyncio.run(guarded(flow.chat(streamed(ASK), answered=gate.set)))
    assert served.text == CLOUD_OTHER and served.model_used == "cerebras"
    assert served.report["reasons"] == ["low_confidence", "hedged"]
    assert served.report["spilled_over"] and served.report["agreement"] is False
    assert len(cloud.history) == 1
    assert served.purposes == [("local", Purpose.DRAFT), ("cerebras", Purpose.HEDGE)]


def test_a_draft_doubted_within_the_budget_is_merged_with_a_hedge_answered_by_then() -> None:
    spec = {"stream_first_token_s": 30, "stream_trust_s": 60, "early_abort": False}
    flow = Flow(local_fake(DOUBTFUL), cloud_fake(CLOUD_SAME), speculative_decoding=spec)
    served = flow.ask(streamed(ASK))
    assert served.text == HEDGED and served.model_used == "local"
    assert served.rec.outcome is Outcome.VERIFIED_DRAFT_USED
    assert "hedged" in served.report["reasons"] and len(flow.cloud.history) == 1


def test_a_prefix_the_scorer_doubts_is_not_waited_for_past_the_budget() -> None:
    # Not stopped early (abort_min_score off), not trusted either (P(wrong) far above 0.1):
    # the cloud's stream goes out at the deadline, and what the draft streamed is counted.
    spec = {"stream_first_token_s": 0, "stream_trust_s": 30, "abort_min_score": None}
    doubtful = Reply(GOOD_DRAFT, token_probs=probs(GOOD_DRAFT, 0.6))
    local = local_fake(doubtful, wait_for=held(), hold_after=12)
    flow = Flow(local, cloud_fake(CLOUD_OTHER), speculative_decoding=spec)
    served = flow.ask(streamed(ASK))
    assert served.model_used == "cerebras" and not served.rec.trusted
    assert served.report["reasons"] == ["hedged", "first_token_budget"]
    draft = served.rec.usage[0]
    assert (draft.model, draft.purpose, draft.completion_tokens) == ("local", Purpose.DRAFT, 11)
    assert served.rec.draft is not None and served.rec.draft.n_tokens == 11  # logged, unjudged
